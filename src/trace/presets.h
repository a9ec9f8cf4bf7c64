#pragma once
// Paper configurations as (policy, predictor) pairs, and `auto`: our best on a given trace.
#include <string>
#include <utility>
#include <vector>

#include "trace/simulator.h"

namespace moeflow::trace {

struct Preset {
  std::string name, policy, predictor;
  double cache_rate_override = 0;  // ondemand keeps only one layer's working set
};

std::vector<std::string> preset_names();
// Resolves a preset for a trace (falls back where the paper's predictor needs hidden states
// the trace lacks; the fallback is named in `predictor`).
Preset resolve_preset(const std::string& name, const Trace& t, const SimConfig& base);
// Simulates every preset and every policy/predictor pair; returns the best by TPOT (ties: hit
// rate).
SimResult auto_select(const Trace& t, const SimConfig& base, std::vector<SimResult>* all = nullptr);

}  // namespace moeflow::trace
