#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "core/error.h"
#include "trace/importers.h"
#include "trace/presets.h"
#include "trace/report.h"
#include "trace/simulator.h"

namespace moeflow::cli {
namespace {

struct SimArgs {
  std::vector<std::string> trace, calib;
  std::string policy = "lru", predictor = "none", preset, hw = "pcie4x16", csv, plot,
              cache_rates = "0.5", predictor_model;
  bool json = false, per_layer = false, global = false, with_prefill = false;
  int max_prefetch = 8;
  int oracle_lookahead = trace::SimConfig{}.oracle_lookahead;
  trace::OracleQuality oracle;
  std::vector<double> hobbit_weights;  // empty: fitted on the calibration trace
};

std::vector<double> parse_rates(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      double r = std::stod(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      if (r > 1) r /= 100;  // accept percentages
      v.push_back(r);
    } catch (const std::exception&) {
      fail("--cache-rate: '{}' is not a number", item);
    }
  }
  MOEFLOW_CHECK(!v.empty(), "--cache-rate: empty list");
  return v;
}

void write_file(const std::string& path, const std::string& data, const char* what) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) fail("{} '{}': cannot open for writing", what, path);
  f << data;
}

int run_sim(const SimArgs& a) {
  const trace::SimConfig defaults;
  const bool oracle_options = a.oracle_lookahead != defaults.oracle_lookahead ||
                              a.oracle.recall != defaults.oracle.recall ||
                              a.oracle.wrong != defaults.oracle.wrong;
  if (oracle_options && a.predictor != "oracle" && a.predictor != "all")
    fail(
        "--oracle-lookahead / --oracle-recall / --oracle-wrong shape --predictor oracle (the "
        "predictor is {})",
        a.predictor);
  trace::Trace t = trace::load_any(a.trace);
  if (!a.with_prefill) t = trace::filter_steps(t, false, true);
  MOEFLOW_CHECK(!t.steps.empty(), "trace '{}': no decode steps (use --with-prefill)", a.trace[0]);
  trace::Trace calib;
  trace::SimConfig base;
  base.hw = trace::hw_profile(a.hw);
  base.global_budget = a.global;
  base.max_prefetch_per_call = a.max_prefetch;
  base.predictor_model = a.predictor_model;
  base.oracle_lookahead = a.oracle_lookahead;
  base.oracle = a.oracle;
  if (!a.hobbit_weights.empty()) {
    MOEFLOW_CHECK(a.hobbit_weights.size() == 4,
                  "--hobbit-weights: expected 4 numbers (lru, lfu, lhu, fld), got {}",
                  a.hobbit_weights.size());
    base.hobbit_weights = a.hobbit_weights;
  }
  if (!a.calib.empty()) {
    calib = trace::load_any(a.calib);
    if (!a.with_prefill) calib = trace::filter_steps(calib, false, true);
    base.calibration = &calib;
  }
  std::vector<std::pair<std::string, std::string>> pairs;  // (policy, predictor)
  std::vector<std::string> preset_rows;
  if (!a.preset.empty()) {
    if (a.preset != "auto") {
      auto p = trace::resolve_preset(a.preset, t, base);
      pairs.push_back({p.policy, p.predictor});
    }
  } else {
    auto pols = a.policy == "all" ? trace::sim_policy_names() : std::vector<std::string>{a.policy};
    std::vector<std::string> preds;
    if (a.predictor == "all") {
      for (auto& p : trace::sim_predictor_names(t))
        if (!(p == "promoe" && a.predictor_model.empty())) preds.push_back(p);
    } else {
      preds = {a.predictor};
    }
    for (auto& pol : pols)
      for (auto& pr : preds) pairs.push_back({pol, pr});
    // Belady demand-only is always reported as the reference row.
    bool has_belady = false;
    for (auto& [p, q] : pairs) has_belady |= p == "belady" && q == "none";
    if (!has_belady) pairs.push_back({"belady", "none"});
  }
  std::vector<trace::SimResult> results;
  for (double r : parse_rates(a.cache_rates)) {
    trace::SimConfig c = base;
    c.cache_rate = r;
    if (a.preset == "ondemand") c.cache_rate = (double)t.top_k / t.n_experts;
    if (a.preset == "auto") {
      results.push_back(trace::auto_select(t, c));
      results.back().cache_rate = r;
      continue;
    }
    for (auto& [pol, pr] : pairs) {
      c.policy = pol;
      c.predictor = pr;
      results.push_back(trace::simulate(t, c));
      if (!a.preset.empty()) results.back().policy = "preset:" + a.preset + "(" + pol + ")";
      results.back().cache_rate = r;
    }
  }
  if (a.json) {
    nlohmann::json j;
    j["trace"] = a.trace;
    j["hw"] = {{"name", base.hw.name},
               {"link_gb_s", base.hw.link_gb_s},
               {"expert_bytes", base.hw.expert_bytes},
               {"transfer_ms", base.hw.transfer_ms()},
               {"expert_compute_ms", base.hw.expert_compute_ms},
               {"layer_ms", base.hw.layer_ms}};
    j["results"] = nlohmann::json::array();
    for (auto& r : results) j["results"].push_back(trace::result_json(r, a.per_layer));
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("%-22s %-10s %6s %8s %10s %8s %8s %8s %9s\n", "policy", "predictor", "cache", "hit",
                "GB_moved", "pf_acc", "in_time", "recall", "TPOT_ms");
    for (auto& r : results)
      std::printf("%-22s %-10s %5.1f%% %7.2f%% %10.2f %8.3f %8.3f %8.3f %9.2f\n", r.policy.c_str(),
                  r.predictor.c_str(), r.cache_rate * 100, r.hit_rate * 100, r.bytes_moved / 1e9,
                  r.prefetch_accuracy, r.in_time_rate, r.pred_recall, r.tpot_ms);
  }
  if (!a.csv.empty()) write_file(a.csv, trace::results_csv(results), "--csv");
  if (!a.plot.empty())
    write_file(a.plot,
               trace::results_svg(results, "moeflow sim: " + t.model + " on " + base.hw.name),
               "--plot");
  return 0;
}

const bool registered_sim = register_command(
    "sim", "Replay a routing trace against cache policies, predictors and a hardware profile",
    [](CLI::App& sub) {
      auto a = std::make_shared<SimArgs>();
      sub.add_option(
             "--trace,-t", a->trace,
             "trace file(s): binary .mft, speculative-moe JSONL, or vLLM-logger layer files")
          ->required();
      sub.add_option("--policy,-p", a->policy, "eviction policy or 'all'");
      sub.add_option("--predictor,-q", a->predictor, "predictor, 'none' or 'all'");
      sub.add_option("--preset", a->preset,
                     "promoe|hobbit|duoserve|moe-infinity|daop|lru|ondemand|auto");
      sub.add_option("--cache-rate,-r", a->cache_rates,
                     "share of experts cached (comma list, 0.5 or 50)");
      sub.add_option("--hw", a->hw,
                     "hardware profile: pcie4x16, nvme-gen4, instant (copies take no "
                     "time: the live engine's --prefetch-wait), local, or a JSON file");
      sub.add_option(
          "--calib", a->calib,
          "calibration trace (static/daop/hobbit, predictor warm-up); default: the trace itself");
      sub.add_option("--predictor-model", a->predictor_model,
                     "ProMoE predictor weights from train-predictor");
      sub.add_option("--hobbit-weights", a->hobbit_weights,
                     "hobbit's score weights lru,lfu,lhu,fld as the live cache uses them (default: "
                     "fitted on the "
                     "calibration trace, an in-sample optimum)")
          ->delimiter(',');
      sub.add_option("--max-prefetch", a->max_prefetch,
                     "prefetches issued per routed layer at most (0: no cap, as the live engine)");
      sub.add_option("--oracle-lookahead", a->oracle_lookahead,
                     "--predictor oracle: routes ahead it predicts (layers; default 32)")
          ->check(CLI::Range(1, 1 << 20));
      sub.add_option("--oracle-recall", a->oracle.recall,
                     "--predictor oracle: share of the future experts it predicts (default 1)")
          ->check(CLI::Range(0.0, 1.0));
      sub.add_option("--oracle-wrong", a->oracle.wrong,
                     "--predictor oracle: experts per predicted route it adds that the route "
                     "does not use, on average (default 0): with --oracle-recall, a predictor "
                     "of a given quality")
          ->check(CLI::Range(0.0, 1024.0));
      sub.add_flag("--global-budget", a->global,
                   "one cache budget over all layers (default: per layer)");
      sub.add_flag("--with-prefill", a->with_prefill,
                   "also replay prefill steps (batched per prompt)");
      sub.add_flag("--json", a->json, "print JSON");
      sub.add_flag("--per-layer", a->per_layer, "per-layer statistics in the JSON");
      sub.add_option("--csv", a->csv, "write CSV here");
      sub.add_option("--plot", a->plot, "write an SVG plot here");
      return CommandMain([a] { return run_sim(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
