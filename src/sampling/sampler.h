#pragma once
// Token sampling: repetition penalty, then greedy (temp <= 0) or temperature -> top-k ->
// top-p -> min-p -> draw. Deterministic for a seed: the generator is a fixed algorithm
// (mt19937_64) and uniforms are made from its raw bits, not from a library distribution.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace moeflow {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int repeat_last_n = 64;    // window of recent tokens the penalty looks at (0: off, -1: all)
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p = {});

  // Picks a token from n_vocab logits. `history` holds the tokens seen so far (prompt and
  // generated); only its last repeat_last_n entries are penalised. Does not modify logits.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  // Probabilities the draw would use (after penalty, temperature, top-k/p, min-p), as
  // (token, prob) pairs in descending probability: exposed so tests can check the filters.
  const std::vector<std::pair<int32_t, float>>& candidates() const { return cand_; }
  void prepare(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerParams& params() const { return p_; }
  void reseed(uint64_t seed) { rng_.seed(seed); }
  double uniform();  // [0, 1)

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<std::pair<int32_t, float>> cand_;
};

// Index of the largest value (first on ties).
int32_t argmax(std::span<const float> v);

}  // namespace moeflow
