#pragma once
// Future-aware components for lower bounds in the simulator: Belady's replacement (evict the
// expert whose next use is farthest) and a perfect predictor. Both read the trace ahead.
#include <memory>

#include "policy/eviction_policy.h"
#include "policy/predictor.h"
#include "trace/trace.h"

namespace moeflow::trace {

// Logical time used by the simulator: step * n_layers + layer.
inline uint64_t logical_time(size_t step, int layer, int n_layers) { return (uint64_t)step * n_layers + layer; }

std::unique_ptr<EvictionPolicy> make_belady(const Trace& t);
// Predicts exactly the experts of the next `lookahead` (step, layer) routes after the current one.
std::unique_ptr<Predictor> make_oracle_predictor(const Trace& t, int lookahead);

}  // namespace moeflow::trace
