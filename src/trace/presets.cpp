#include "trace/presets.h"

#include <cmath>

#include "core/error.h"
#include "policy/eviction_policy.h"

namespace moeflow::trace {

std::vector<std::string> preset_names() {
  return {"promoe", "hobbit", "duoserve", "moe-infinity", "daop", "lru", "ondemand", "auto"};
}

std::vector<std::string> live_preset_names() {
  std::vector<std::string> v;
  for (const std::string& n : preset_names())
    if (n != "ondemand" && n != "auto") v.push_back(n);
  return v;
}

Preset resolve_preset(const std::string& n, const PresetInputs& in) {
  if (n == "promoe") return {n, "lru", in.hidden && in.predictor_model ? "promoe" : "token"};
  if (n == "hobbit") return {n, "hobbit", in.hidden && in.router ? "stacked" : "none"};
  if (n == "duoserve") return {n, "lru", "duoserve"};
  if (n == "moe-infinity") return {n, "moe-infinity", "eamc"};
  if (n == "daop") return {n, "daop", "none"};
  if (n == "lru") return {n, "lru", "none"};
  fail(
      "unknown preset '{}' (known: promoe, hobbit, duoserve, moe-infinity, daop, lru, ondemand, "
      "auto)",
      n);
}

Preset resolve_preset(const std::string& n, const Trace& t, const SimConfig& base) {
  if (n == "ondemand") return {n, "lru", "none", (double)t.top_k / (double)t.n_experts};
  return resolve_preset(
      n, PresetInputs{t.has_hidden(), !t.routers.empty(), !base.predictor_model.empty()});
}

SimResult auto_select(const Trace& t, const SimConfig& base, std::vector<SimResult>* all) {
  SimResult best;
  bool have = false;
  auto consider = [&](SimResult r) {
    if (all) all->push_back(r);
    if (!have || r.tpot_ms < best.tpot_ms - 1e-9 ||
        (std::abs(r.tpot_ms - best.tpot_ms) <= 1e-9 && r.hit_rate > best.hit_rate)) {
      best = r;
      have = true;
    }
  };
  // Every preset is a candidate, so auto can never do worse than the best preset.
  for (auto& pn : preset_names()) {
    if (pn == "auto" || pn == "ondemand") continue;
    Preset p = resolve_preset(pn, t, base);
    SimConfig c = base;
    c.policy = p.policy, c.predictor = p.predictor;
    consider(simulate(t, c));
  }
  for (auto& pol : eviction_policy_names())
    for (auto& pr : sim_predictor_names(t)) {
      if (pr == "oracle" || (pr == "promoe" && base.predictor_model.empty())) continue;
      SimConfig c = base;
      c.policy = pol, c.predictor = pr;
      consider(simulate(t, c));
    }
  best.policy = "auto:" + best.policy;
  return best;
}

}  // namespace moeflow::trace
