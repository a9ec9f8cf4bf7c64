#include "runtime/offload_auto.h"

#include <algorithm>

#include "experts/expert_store.h"

namespace moeflow {

AutoPolicy resolve_auto_policy(const std::string& policy, bool per_layer, uint64_t budget_bytes,
                               uint64_t slot_bytes, int top_k, int moe_layers) {
  if (policy != "auto") return {policy, per_layer};
  const uint64_t slots = slot_bytes ? budget_bytes / slot_bytes : 0;
  const bool split =
      moe_layers > 0 && slots / static_cast<uint64_t>(moe_layers) >= static_cast<uint64_t>(top_k);
  if (per_layer || split) return {"lfu", true};
  return {"lfu-cycle", false};
}

int resolve_io_threads(int io_threads, const ExpertStore& store) {
  if (io_threads > 0) return io_threads;
  uint64_t bytes = 0, chunks = 0;
  for (int l = 0; l < store.n_layers(); ++l)
    for (int e = 0; e < store.n_experts(l); ++e)
      for (int p = 0; p < kNumExpertProj; ++p)
        if (const uint64_t n = store.chunk(l, e, p).aligned_len) bytes += n, ++chunks;
  if (chunks == 0) return 2;
  const uint64_t mean = bytes / chunks;
  constexpr uint64_t kInFlight = 8ull << 20;
  return static_cast<int>(std::clamp<uint64_t>((kInFlight + mean - 1) / mean, 2, 16));
}

}  // namespace moeflow
