#pragma once
// Where the experts go on a GPU (`--backend cuda`), decided once before the engine loads:
//   --vram-budget SIZE   a VRAM expert cache of that size (experts copied in on demand and ahead
//                        of need from the slow tier, experts/device_transfer.h)
//   --vram-free SIZE     a VRAM expert cache of whatever leaves SIZE of VRAM free once the
//                        non-expert weights, KV cache and activations are in
//   neither (auto)       every expert in VRAM when they fit beside the rest with the default
//                        reserve (kVramReserve + 5% of the device), else a cache as with
//                        --vram-free <that reserve>
//   --vram-limit SIZE    plan as if the device had at most SIZE of VRAM (a fair comparison with a
//                        smaller GPU, or room left for other processes)
// The slow tier the cache copies from (--expert-source): ram (the mapped file, page-locked) when
// host memory holds every expert, file (O_DIRECT -> pinned staging -> VRAM, the third tier)
// when it does not; auto picks by that rule. A pure function of byte counts, tested on the host.
#include <cstdint>
#include <string>

#include "experts/device_transfer.h"
#include "runtime/auto_fit.h"

namespace moeflow {

struct OffloadOptions;

// What VRAM keeps free by default for the CUDA context, cuBLAS workspace, the prefill tiles
// and allocator slack (plus 5% of the device).
constexpr uint64_t kVramReserve = 768ull << 20;

struct VramPlan {
  bool cache = false;  // false: every expert in VRAM
  uint64_t budget = 0;
  uint64_t free_vram = 0, total_vram = 0, reserve = 0;
  DeviceSource source = DeviceSource::Ram;
  std::string reason;  // one line: what was chosen and why
};

// `host_available`: bytes of host memory this process may use (0: unknown, taken as enough).
// Throws moeflow::Error naming every term when the budget cannot hold one layer's top-k, for
// contradicting options (--vram-budget with --vram-free, CPU-tier sizes) and bad sizes.
VramPlan plan_vram(const OffloadOptions& o, const ModelMemory& m, uint64_t free_vram,
                   uint64_t total_vram, uint64_t host_available);

}  // namespace moeflow
