#pragma once
// Constructors of the built-in eviction policies, gathered by the factory in policy_factory.cpp.
#include <cstdint>
#include <memory>

#include "policy/eviction_policy.h"

namespace moeflow::policies {

std::unique_ptr<EvictionPolicy> make_lru(const PolicyOptions& opt);
std::unique_ptr<EvictionPolicy> make_lfu(const PolicyOptions& opt);
std::unique_ptr<EvictionPolicy> make_static(const PolicyOptions& opt);
std::unique_ptr<EvictionPolicy> make_moe_infinity(const PolicyOptions& opt);
std::unique_ptr<EvictionPolicy> make_hobbit(const PolicyOptions& opt);
std::unique_ptr<EvictionPolicy> make_lfu_cycle(const PolicyOptions& opt);
std::unique_ptr<EvictionPolicy> make_daop(const PolicyOptions& opt);

// HOBBIT score weights {lru, lfu, lhu, fld} used when PolicyOptions::weights is empty.
std::vector<double> hobbit_default_weights();
// Experts of `layer` (all layers when layer < 0), most used in the calibration first.
std::vector<ExpertKey> rank_by_calibration(const PolicyOptions& o, int layer);

// Hash-map key for an expert; policies keep sparse state so they work without knowing the
// model's shape in advance (the live cache may build them with zeroed options).
inline uint64_t pack(ExpertKey k) {
  return ((uint64_t)(uint32_t)k.layer << 32) | (uint32_t)k.expert;
}

// Calibrated count of (layer, expert), 0 when the calibration does not cover it.
inline double calib_count(const PolicyOptions& o, ExpertKey k) {
  if (k.layer < 0 || k.expert < 0 || k.layer >= o.n_layers || k.expert >= o.n_experts) return 0;
  size_t i = (size_t)k.layer * o.n_experts + k.expert;
  return i < o.calib_counts.size() ? o.calib_counts[i] : 0;
}

}  // namespace moeflow::policies
