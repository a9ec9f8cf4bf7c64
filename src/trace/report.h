#pragma once
// Output of simulator results: JSON, CSV, and a self-written SVG plot.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/simulator.h"

namespace moeflow::trace {

nlohmann::json result_json(const SimResult& r, bool per_layer);
std::string results_csv(const std::vector<SimResult>& rs);
// Two panels (hit rate, TPOT) vs cache rate, one polyline per policy/predictor pair.
std::string results_svg(const std::vector<SimResult>& rs, const std::string& title);

}  // namespace moeflow::trace
