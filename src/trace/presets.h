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
// The presets the live engine takes (`--preset`): every one but `ondemand`, a simulator
// baseline (one layer's working set), and `auto`, which is the engine's default anyway.
std::vector<std::string> live_preset_names();

// What a preset's predictor can read where it runs: the live engine has hidden states and
// routers; a trace only if it was recorded with them. ProMoE needs trained weights.
struct PresetInputs {
  bool hidden = false, router = false, predictor_model = false;
};
// Resolves a preset (falls back where the paper's predictor needs inputs that are missing; the
// fallback is named in `predictor`). Throws naming the known presets.
Preset resolve_preset(const std::string& name, const PresetInputs& in);
// The same for a trace and the simulator's configuration.
Preset resolve_preset(const std::string& name, const Trace& t, const SimConfig& base);
// Simulates every preset and every policy/predictor pair; returns the best by TPOT (ties: hit
// rate).
SimResult auto_select(const Trace& t, const SimConfig& base, std::vector<SimResult>* all = nullptr);

}  // namespace moeflow::trace
