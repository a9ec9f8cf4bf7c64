#pragma once
// Token sampling: logit bias, then the penalties (repetition, frequency, presence), then greedy
// (temp <= 0) or temperature -> top-k -> top-p -> min-p -> draw. Deterministic for a seed: the
// generator is a fixed algorithm (mt19937_64) and uniforms are made from its raw bits, not from a
// library distribution. An optional TokenConstraint (a grammar) limits what may be drawn.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sampling/token_constraint.h"

namespace moeflow {

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int repeat_last_n = 64;       // window of recent tokens the penalties look at (0: off, -1: all)
  // OpenAI's penalties, applied as llama.cpp applies them: over the same window as the
  // repetition penalty (prompt included), logit -= count * frequency + (count > 0) * presence.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // (token, bias) added to the logit before anything else; ids outside the vocabulary are skipped.
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
};

// The first parameter outside its range, named both ways so the CLI and the server word the
// same rule in their own terms: "--temp must be in [0, 100], got -1" / "'temperature' must be ...".
struct SamplerParamError {
  const char* field;        // JSON name, e.g. "repeat_penalty"
  const char* flag;         // CLI option, e.g. "--repeat-penalty"
  std::string requirement;  // e.g. "must be > 0 and <= 100"
  std::string value;        // the offending value as text
};
// Ranges: temperature [0, 100], top_k >= -1 (<= 0: off), top_p [0, 1], min_p [0, 1],
// repeat_penalty (0, 100], repeat_last_n >= -1, presence/frequency penalty [-2, 2] (OpenAI's),
// logit_bias ids >= 0 with biases in [-100, 100]. NaN is outside every range.
std::optional<SamplerParamError> check_sampler_params(const SamplerParams& p);

class Sampler {
 public:
  // Throws moeflow::Error worded for the CLI when check_sampler_params finds a problem.
  explicit Sampler(const SamplerParams& p = {});

  // Picks a token from n_vocab logits. `history` holds the tokens seen so far (prompt and
  // generated); only its last repeat_last_n entries are penalised. Does not modify logits.
  // With a constraint, the token drawn is checked first and only when it is refused are the
  // logits masked and the draw made again (a refused token costs a mask, an allowed one a
  // check); when the constraint asks for it (mask_first: its mask is cached, or draws are mostly
  // refused lately) the logits are masked first and drawn once. Without filters (temperature only,
  // or greedy) both draw exactly from the masked distribution: P(t) = p(t) + P(refused) * p(t) /
  // P(allowed) = p(t) / P(allowed). The chosen token is then passed to the constraint's accept().
  // Throws when the constraint allows nothing.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // Not owned; nullptr removes it. Must outlive the samples drawn with it.
  void set_constraint(TokenConstraint* c) { constraint_ = c; }
  TokenConstraint* constraint() const { return constraint_; }

  // Probabilities the draw would use (after bias, penalties, temperature, top-k/p, min-p), as
  // (token, prob) pairs in descending probability: exposed so tests can check the filters.
  // Tokens whose logit is -inf (masked) are never candidates.
  const std::vector<std::pair<int32_t, float>>& candidates() const { return cand_; }
  void prepare(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerParams& params() const { return p_; }
  void reseed(uint64_t seed) { rng_.seed(seed); }
  double uniform();  // [0, 1)

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  TokenConstraint* constraint_ = nullptr;
  void apply_bias_and_penalties(std::span<const int32_t> history);
  int32_t draw(std::span<const float> logits, std::span<const int32_t> history);
  std::vector<float> work_;
  std::vector<float> masked_;    // scratch: the logits with the constraint's mask
  std::vector<int32_t> window_;  // scratch: the penalty window, sorted to count repeats
  std::vector<std::pair<int32_t, float>> cand_;
};

// Index of the largest value (first on ties).
int32_t argmax(std::span<const float> v);

}  // namespace moeflow
