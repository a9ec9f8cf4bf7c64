#pragma once
// Hardware profiles for the trace-driven simulator: how long moving and computing one expert
// takes. Built-ins model a GPU behind PCIe 4.0 x16 and a CPU reading experts from an NVMe SSD;
// "local" reads this machine's measured O_DIRECT bandwidth from a JSON file; "instant" moves
// experts in no time (the logical counts only: the live engine's --prefetch-wait).
#include <string>
#include <vector>

namespace moeflow::trace {

struct HwProfile {
  std::string name;
  double link_gb_s = 25.0;       // slow tier -> fast tier, GB/s (1e9 bytes)
  double latency_ms = 0.01;      // per transfer set-up
  double expert_bytes = 0;       // bytes of one expert (all its matrices)
  double expert_compute_ms = 0;  // one expert for one token, weights resident
  double layer_ms = 0;       // non-MoE work of one layer for one token (attention, norms, router)
  double cpu_expert_ms = 0;  // computing a non-resident expert where it lives (0 = not possible)
  double transfer_ms() const { return latency_ms + expert_bytes / (link_gb_s * 1e6); }
};

// Name ("pcie4x16", "nvme-gen4", "instant", "local") or path to a JSON file with the fields above.
// "local" reads $MOEFLOW_LOCAL_PROFILE or bench/io/local_profile.json ({"read_gb_s": ...}).
HwProfile hw_profile(const std::string& name_or_path);
std::vector<std::string> hw_profile_names();

}  // namespace moeflow::trace
