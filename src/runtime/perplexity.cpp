#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "model/model.h"

namespace moeflow {

namespace {

// First index of the largest value (the tie rule of greedy sampling).
size_t argmax_row(std::span<const float> v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

// max + log(sum exp(x - max)), in double.
double log_sum_exp(std::span<const float> logits, float* max_out) {
  float mx = logits[0];
  for (float x : logits) mx = std::max(mx, x);
  double sum = 0;
  for (float x : logits) sum += std::exp((double)x - (double)mx);
  *max_out = mx;
  return std::log(sum);
}

}  // namespace

double PerplexityResult::ppl() const { return count ? std::exp(nll_sum / count) : 0.0; }

double PerplexityResult::ppl_stderr() const {
  if (count < 2) return 0;
  const double m = nll_sum / count;
  const double var = nll2_sum / count - m * m;
  return var > 0 ? ppl() * std::sqrt(var / (count - 1)) : 0.0;
}

double log_prob(std::span<const float> logits, int32_t target) {
  if (target < 0 || (size_t)target >= logits.size())
    fail("perplexity: token id {} outside the vocabulary of {}", target, logits.size());
  float mx;
  const double lse = log_sum_exp(logits, &mx);
  return ((double)logits[target] - (double)mx) - lse;
}

void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  float mx;
  const double lse = log_sum_exp(logits, &mx);
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = ((double)logits[i] - (double)mx) - lse;
}

ChunkPlan plan_chunks(size_t n_tokens, const PerplexityConfig& cfg) {
  // Below 3 the second half of a chunk scores nothing (first = n_ctx/2 is the last row).
  if (cfg.n_ctx < 3)
    fail("perplexity: the context size (-c) must be at least 3, got {}", cfg.n_ctx);
  if (cfg.n_chunks == 0)
    fail("perplexity: --chunks 0 scores nothing (use a positive count, or -1 for all)");
  if ((int64_t)n_tokens < 2 * cfg.n_ctx)
    fail(
        "perplexity: the text tokenizes to {} tokens; at least {} (2 x the context size {}) are "
        "needed, as llama.cpp's perplexity requires (use a longer text or a smaller -c)",
        n_tokens, 2 * cfg.n_ctx, cfg.n_ctx);
  ChunkPlan p;
  p.n_ctx = cfg.n_ctx;
  p.first = cfg.n_ctx / 2;
  const int64_t max_chunks = (int64_t)n_tokens / cfg.n_ctx;
  p.n_chunks = (int)(cfg.n_chunks < 0 ? max_chunks : std::min<int64_t>(cfg.n_chunks, max_chunks));
  return p;
}

std::vector<int32_t> chunk_tokens(std::span<const int32_t> tokens, const ChunkPlan& plan,
                                  int32_t bos_id) {
  std::vector<int32_t> out(tokens.begin(), tokens.begin() + plan.n_chunks * plan.n_ctx);
  if (bos_id >= 0)
    for (int c = 0; c < plan.n_chunks; ++c) out[c * plan.n_ctx] = bos_id;
  return out;
}

PerplexityResult run_perplexity(ForwardContext& ctx, std::span<const int32_t> tokens,
                                const PerplexityConfig& cfg, const ScoredRowFn& on_row,
                                const ChunkDoneFn& on_chunk) {
  const ChunkPlan plan = plan_chunks(tokens.size(), cfg);
  if (ctx.n_ctx() < plan.n_ctx)
    fail("perplexity: the engine's context ({}) is smaller than the chunk size {}", ctx.n_ctx(),
         plan.n_ctx);
  const int64_t V = ctx.model().n_vocab();
  const std::vector<int32_t> all = chunk_tokens(tokens, plan, cfg.bos_id);
  const int64_t B = ctx.max_batch();
  // The last position's logits score nothing (its target is in the next chunk), so each
  // chunk runs positions 0 .. n_ctx-2 only; causal attention makes that exact.
  const int64_t n_run = plan.n_ctx - 1;
  PerplexityResult r;
  const double t0 = now_seconds();
  for (int c = 0; c < plan.n_chunks; ++c) {
    const std::span<const int32_t> chunk(all.data() + c * plan.n_ctx, (size_t)plan.n_ctx);
    ctx.reset();
    for (int64_t s = 0; s < n_run; s += B) {
      const int64_t n = std::min(B, n_run - s);
      const int64_t lo = std::max(s, plan.first), hi = s + n;  // scored rows [lo, hi)
      ctx.forward(chunk.subspan(s, n), lo < hi ? LogitsMode::All : LogitsMode::None);
      r.n_evaluated += n;
      for (int64_t p = lo; p < hi; ++p) {
        ScoredRow row;
        row.chunk = c;
        row.index = r.count;
        row.pos = p;
        row.target = chunk[p + 1];
        row.logits = std::span<const float>(ctx.logits() + (p - s) * V, (size_t)V);
        row.nll = -log_prob(row.logits, row.target);
        r.nll_sum += row.nll;
        r.nll2_sum += row.nll * row.nll;
        ++r.count;
        if (on_row) on_row(row);
      }
    }
    r.n_chunks = c + 1;
    r.chunk_ppl.push_back(r.ppl());
    r.seconds = now_seconds() - t0;
    if (on_chunk) on_chunk(c, r);
  }
  return r;
}

void KlDivergence::add(std::span<const float> exact_logits, std::span<const float> logits,
                       int32_t target) {
  if (exact_logits.size() != logits.size())
    fail("KL divergence: rows of {} and {} logits", exact_logits.size(), logits.size());
  log_softmax(exact_logits, lp_exact_);
  log_softmax(logits, lp_);
  double kl = 0;
  for (size_t i = 0; i < lp_.size(); ++i) kl += std::exp(lp_exact_[i]) * (lp_exact_[i] - lp_[i]);
  kl_.push_back(kl);
  kl_sum_ += kl;
  kl2_sum_ += kl * kl;
  nll_exact_sum_ -= lp_exact_[target];
  nll_sum_ -= lp_[target];
  same_top_ += argmax_row(exact_logits) == argmax_row(logits);
}

double KlDivergence::mean() const { return kl_.empty() ? 0.0 : kl_sum_ / kl_.size(); }

double KlDivergence::mean_stderr() const {
  const double n = (double)kl_.size();
  if (n < 2) return 0;
  const double m = kl_sum_ / n, var = kl2_sum_ / n - m * m;
  return var > 0 ? std::sqrt(var / (n - 1)) : 0.0;
}

double KlDivergence::quantile(double q) const {
  if (kl_.empty()) return 0;
  std::vector<double> v = kl_;
  const size_t k = std::min(v.size() - 1, (size_t)std::floor(q * (double)(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

double KlDivergence::max() const {
  return kl_.empty() ? 0.0 : *std::max_element(kl_.begin(), kl_.end());
}

double KlDivergence::top1_agreement() const {
  return kl_.empty() ? 0.0 : (double)same_top_ / (double)kl_.size();
}

double KlDivergence::ppl_exact() const {
  return kl_.empty() ? 0.0 : std::exp(nll_exact_sum_ / kl_.size());
}

double KlDivergence::ppl() const { return kl_.empty() ? 0.0 : std::exp(nll_sum_ / kl_.size()); }

}  // namespace moeflow
