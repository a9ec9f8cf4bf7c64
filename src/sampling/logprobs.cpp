#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moeflow {

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int top_n) {
  if (logits.empty()) fail("logprobs: empty logits");
  if (chosen < 0 || (size_t)chosen >= logits.size())
    fail("logprobs: token {} is outside the logits", chosen);
  // log-sum-exp in double around the maximum: exact enough for float output, never overflows.
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp((double)l - mx);
  const double lse = mx + std::log(sum);
  TokenLogprobs out;
  out.logprob = (float)(logits[chosen] - lse);
  const size_t n = std::min<size_t>((size_t)std::max(0, top_n), logits.size());
  if (n == 0) return out;
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  // A running top-n kept sorted: n is small (<= 20), the vocabulary large.
  std::vector<int32_t> best;
  best.reserve(n + 1);
  for (int32_t i = 0; i < (int32_t)logits.size(); ++i) {
    if (best.size() == n && !better(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (best.size() > n) best.pop_back();
  }
  for (int32_t t : best) out.top.emplace_back(t, (float)(logits[t] - lse));
  return out;
}

}  // namespace moeflow
