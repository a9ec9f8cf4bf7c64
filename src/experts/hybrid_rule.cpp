#include "experts/hybrid_rule.h"

#include <algorithm>

namespace moeflow {

double cpu_expert_seconds(const HybridCosts& c, int n_tokens) {
  return c.cpu_expert_s + c.cpu_token_s * std::max(0, n_tokens - 1);
}

bool prefer_cpu(const HybridCosts& c, int n_tokens, uint64_t bytes_left) {
  if (!c.valid() || n_tokens <= 0) return false;
  return cpu_expert_seconds(c, n_tokens) < double(bytes_left) / c.h2d_bytes_per_s;
}

}  // namespace moeflow
