#pragma once
// Perplexity with llama.cpp's rule (the default mode of its `llama-perplexity` tool), so that
// the two engines give the same number on the same text, and the KL divergence of a run
// against the saved logits of an exact run (measuring lossy modes: quantized or skipped
// experts, low-precision caches). docs/perplexity.md has the rule with an example.
//
//   * the text is tokenized once, with BOS if the vocabulary adds one;
//   * it is cut into n_chunks = min(--chunks, n_tokens / n_ctx) chunks of n_ctx tokens (the
//     tail that does not fill a chunk is dropped); at least 2 * n_ctx tokens are required;
//   * each chunk is evaluated from an empty KV cache with its first token replaced by BOS
//     when the vocabulary adds BOS;
//   * with first = n_ctx / 2, the logits at positions first .. n_ctx-2 score the tokens at
//     first+1 .. n_ctx-1 (n_ctx - first - 1 per chunk): every scored token has seen at least
//     half a window of context;
//   * ppl = exp(mean NLL) over all scored tokens, with llama.cpp's error estimate
//     ppl * sqrt((E[nll^2] - E[nll]^2) / (count - 1)).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace moeflow {

class ForwardContext;

struct PerplexityConfig {
  int64_t n_ctx = 512;
  int n_chunks = -1;    // < 0: as many as the text fills
  int32_t bos_id = -1;  // >= 0: replaces each chunk's first token (the vocabulary adds BOS)
};

struct ChunkPlan {
  int64_t n_ctx = 0;
  int64_t first = 0;  // first logits row scored in each chunk (n_ctx / 2)
  int n_chunks = 0;
  int64_t scored_per_chunk() const { return n_ctx - first - 1; }
  int64_t n_scored() const { return scored_per_chunk() * n_chunks; }
};

// Checks the configuration against a text of n_tokens tokens; throws moeflow::Error with the
// reason (context too small, text shorter than two windows, --chunks 0).
ChunkPlan plan_chunks(size_t n_tokens, const PerplexityConfig& cfg);

// One scored position: `logits` (n_vocab, valid during the callback) predict `target`.
struct ScoredRow {
  int chunk = 0;
  int64_t index = 0;  // among all scored rows of the run, in order
  int64_t pos = 0;    // position of the logits row inside its chunk
  int32_t target = 0;
  double nll = 0;  // -log p(target)
  std::span<const float> logits;
};

struct PerplexityResult {
  double nll_sum = 0, nll2_sum = 0;
  int64_t count = 0;
  int n_chunks = 0;
  std::vector<double> chunk_ppl;  // running perplexity after each chunk (llama.cpp's [i]x,)
  double seconds = 0;             // wall time of the forward passes and scoring
  int64_t n_evaluated = 0;        // tokens run through the model
  double ppl() const;
  double ppl_stderr() const;  // 0 when it cannot be estimated
};

// log p(target) under softmax(logits), in double precision.
double log_prob(std::span<const float> logits, int32_t target);
// log-softmax of a whole row, in double precision.
void log_softmax(std::span<const float> logits, std::vector<double>& out);

using ScoredRowFn = std::function<void(const ScoredRow&)>;
using ChunkDoneFn = std::function<void(int chunk, const PerplexityResult& so_far)>;

// Runs the plan over `tokens` on `ctx` (its n_ctx must hold one chunk). on_row sees every
// scored row in order; on_chunk is called after each chunk.
PerplexityResult run_perplexity(ForwardContext& ctx, std::span<const int32_t> tokens,
                                const PerplexityConfig& cfg, const ScoredRowFn& on_row = {},
                                const ChunkDoneFn& on_chunk = {});

// The tokens each chunk is evaluated with (BOS substitution applied), chunk after chunk.
std::vector<int32_t> chunk_tokens(std::span<const int32_t> tokens, const ChunkPlan& plan,
                                  int32_t bos_id);

// KL(exact || this run) and friends over the scored rows, accumulated row by row.
class KlDivergence {
 public:
  void add(std::span<const float> exact_logits, std::span<const float> logits, int32_t target);
  int64_t count() const { return (int64_t)kl_.size(); }
  double mean() const;
  double mean_stderr() const;
  double quantile(double q) const;  // q in [0, 1] over the per-row values
  double max() const;
  double top1_agreement() const;  // fraction of rows whose argmax is the same
  double ppl_exact() const;       // perplexity of the exact logits on the same targets
  double ppl() const;             // perplexity of this run's logits (same as the main one)

 private:
  std::vector<double> kl_;
  double kl_sum_ = 0, kl2_sum_ = 0, nll_exact_sum_ = 0, nll_sum_ = 0;
  int64_t same_top_ = 0;
  std::vector<double> lp_exact_, lp_;
};

}  // namespace moeflow
