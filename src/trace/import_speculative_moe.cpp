#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace/importers.h"

namespace moeflow::trace {

namespace {

struct RoutingRow {
  int layer;
  std::vector<int> experts;
  std::vector<float> weights;
};

}  // namespace

Trace import_speculative_moe(const std::string& path, int n_layers, int n_experts) {
  std::ifstream f(path);
  if (!f) fail("trace '{}': cannot open", path);
  // (problem, phase, pos) -> routes by layer
  std::map<std::tuple<int, int, int>, std::map<int, RoutingRow>> steps;
  std::map<std::pair<int, int>, int> next_pos,
      decode_count;  // (problem, layer) counters for token_pos files
  std::map<std::pair<int, int>, bool> in_decode;
  std::string line;
  size_t lineno = 0;
  int max_layer = -1, max_expert = -1;
  size_t k = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail("trace '{}' line {}: bad JSON ({})", path, lineno, e.what());
    }
    try {
      int prob = j.value("problem_id", 0);
      RoutingRow r;
      r.layer = j.at("layer").get<int>();
      r.experts = j.at("experts").get<std::vector<int>>();
      if (j.contains("gating_probs")) r.weights = j.at("gating_probs").get<std::vector<float>>();
      MOEFLOW_CHECK(r.layer >= 0 && r.layer < 65536, "trace '{}' line {}: bad layer {}", path,
                    lineno, r.layer);
      MOEFLOW_CHECK(!r.experts.empty(), "trace '{}' line {}: no experts", path, lineno);
      for (int e : r.experts)
        MOEFLOW_CHECK(e >= 0 && e < 65536, "trace '{}' line {}: bad expert id {}", path, lineno, e);
      if (!r.weights.empty() && r.weights.size() != r.experts.size())
        fail("trace '{}' line {}: {} gating_probs for {} experts", path, lineno, r.weights.size(),
             r.experts.size());
      max_layer = std::max(max_layer, r.layer);
      for (int e : r.experts) max_expert = std::max(max_expert, e);
      k = std::max(k, r.experts.size());
      int phase, pos;
      if (j.contains("token_idx")) {
        phase = 1, pos = j.at("token_idx").get<int>();
      } else {
        int tp = j.at("token_pos").get<int>();
        auto key = std::make_pair(prob, r.layer);
        // Prefill rows count up from 0; the first row that breaks the count starts decode.
        if (!in_decode[key] && tp == next_pos[key]) {
          phase = 0, pos = tp, next_pos[key]++;
        } else {
          in_decode[key] = true;
          phase = 1, pos = decode_count[key]++;
        }
      }
      MOEFLOW_CHECK(pos >= 0, "trace '{}' line {}: negative token index", path, lineno);
      auto& slot = steps[{prob, phase, pos}];
      if (slot.count(r.layer))
        fail("trace '{}' line {}: duplicate row for problem {} layer {} token {}", path, lineno,
             prob, r.layer, pos);
      slot[r.layer] = std::move(r);
    } catch (const nlohmann::json::exception& e) {
      fail("trace '{}' line {}: missing or bad field ({})", path, lineno, e.what());
    }
  }
  if (steps.empty()) fail("trace '{}': no routing rows", path);
  Trace t;
  t.model = "Mixtral-8x7B-Instruct-v0.1";
  t.source = path;
  t.n_layers = n_layers > 0 ? n_layers : max_layer + 1;
  t.n_experts = n_experts > 0 ? n_experts : max_expert + 1;
  t.top_k = (int)k;
  std::map<int, uint32_t> req_ids;
  for (auto& [key, routes] : steps) {
    auto [prob, phase, pos] = key;
    if (!req_ids.count(prob)) req_ids[prob] = (uint32_t)req_ids.size();
    TokenStep s;
    s.request = req_ids[prob];
    s.phase = phase == 0 ? Phase::prefill : Phase::decode;
    s.pos = (uint32_t)pos;
    for (auto& [l, r] : routes)
      s.routes.push_back({l, std::move(r.experts), std::move(r.weights), {}});
    t.steps.push_back(std::move(s));
  }
  t.validate(path);
  return t;
}

}  // namespace moeflow::trace
