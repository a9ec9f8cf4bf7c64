// The trace-driven simulator on hand-made traces with known answers, Belady as a lower bound on
// random traces, presets/auto, and the `moeflow sim --json` contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/eviction_policy.h"
#include "support/require_data.h"
#include "trace/hw_profile.h"
#include "trace/importers.h"
#include "trace/oracle.h"
#include "trace/presets.h"
#include "trace/report.h"
#include "trace/simulator.h"
#include "trace_util.h"

namespace moeflow::trace {
namespace {

using testing::letters;
using testing::make_trace;

// 1 ms per transfer, 1 ms per expert, no other cost: stalls are easy to count by hand.
HwProfile unit_hw() {
  HwProfile h;
  h.name = "unit";
  h.link_gb_s = 1.0;
  h.latency_ms = 0;
  h.expert_bytes = 1e6;
  h.expert_compute_ms = 1.0;
  h.layer_ms = 0;
  h.cpu_expert_ms = 0;
  return h;
}

SimResult sim(const Trace& t, const std::string& pol, double rate,
              const std::string& pred = "none") {
  SimConfig c;
  c.hw = unit_hw();
  c.policy = pol;
  c.predictor = pred;
  c.cache_rate = rate;
  if (pol == "hobbit") c.hobbit_weights = {0.4, 0.3, 0.1, 0.2};
  return simulate(t, c);
}

TEST(Simulator, DemandOnlyHitsOnABCABC) {
  Trace t = letters("ABCABC");  // 4 experts, 2 slots
  EXPECT_EQ(sim(t, "lru", 0.5).hits, 0u);
  EXPECT_EQ(sim(t, "lfu", 0.5).hits, 0u);
  // Classic MIN, cold, every miss cached: A B C(evict B) A(hit) B(evict A) C(hit).
  EXPECT_EQ(sim(t, "belady-forced", 0.5).hits, 2u);
  // With bypass and a warm start (preloads A, B; C is never worth a slot): only the C's miss.
  auto b = sim(t, "belady", 0.5);
  EXPECT_EQ(b.hits, 4u);
  EXPECT_EQ(b.uses, 6u);
  EXPECT_DOUBLE_EQ(b.hit_rate, 4.0 / 6.0);
}

TEST(Simulator, LruVersusLfuOnAKnownSequence) {
  // A A A B C A B C A with 2 slots: LFU keeps the frequent A (hits A A, then A twice), LRU
  // cycles A B C through 2 slots and only hits the first repeats.
  Trace t = letters("AAABCABCA");
  EXPECT_EQ(sim(t, "lru", 0.5).hits, 2u);
  EXPECT_EQ(sim(t, "lfu", 0.5).hits, 4u);
  // On a cyclic pattern that is where frequency does not help, both get nothing.
  EXPECT_EQ(sim(letters("ABCABCABC"), "lfu", 0.5).hits, sim(letters("ABCABCABC"), "lru", 0.5).hits);
}

TEST(Simulator, TimingOfMissesAndBytes) {
  Trace t = letters("AAAA");
  auto r = sim(t, "lru", 0.25);  // one slot
  EXPECT_EQ(r.hits, 3u);
  EXPECT_EQ(r.demand_loads, 1u);
  EXPECT_DOUBLE_EQ(r.bytes_moved, 1e6);
  // First token: 1 ms transfer stall + 1 ms compute; then 1 ms each.
  EXPECT_NEAR(r.tpot_ms, (2.0 + 1 + 1 + 1) / 4, 1e-9);
  EXPECT_NEAR(r.stall_ms, 1.0, 1e-9);
  EXPECT_EQ(r.decode_tokens, 4u);
}

// DAOP swaps its placement after a prompt: the swapped-in expert is read, but it is no routed
// miss. The simulator counts it apart, so that a comparison of policies by their reads can add
// it back (bench/causal_ceiling.py).
TEST(Simulator, PlacementLoadsAfterAPrefillAreCountedApartFromMisses) {
  Trace calib = letters("AAAA");  // DAOP's calibration: A is the layer's one resident
  Trace t = letters("BBBBB");
  for (int s = 0; s < 3; ++s)
    t.steps[s].phase = Phase::prefill;  // a 3-token prompt, then 2 decode steps
  SimConfig c;
  c.hw = unit_hw();
  c.policy = "daop";
  c.cache_rate = 0.25;  // one slot
  c.calibration = &calib;
  const SimResult r = simulate(t, c);
  // The prompt's B is streamed (DAOP does not admit it), then placed instead of A: no decode
  // use reads again (the first waits for the placement read still in flight, the second hits).
  // One read for the prompt's B, one for the placement.
  EXPECT_EQ(r.placement_loads, 1u);
  EXPECT_EQ(r.demand_loads, 2u);
  EXPECT_EQ(r.decode_tokens, 2u);
  EXPECT_EQ(r.late, 1u);
  EXPECT_EQ(r.hits, 1u);
  // LFU caches the prompt's miss and places nothing.
  c.policy = "lfu";
  const SimResult l = simulate(t, c);
  EXPECT_EQ(l.placement_loads, 0u);
  EXPECT_EQ(l.demand_loads, 1u);
}

TEST(Simulator, InTimePrefetchBecomesAHitLatePrefetchDoesNot) {
  // Layer 0 always expert 0; layer 1 alternates 1, 2 with one slot per layer: demand-only
  // misses every layer-1 use.
  std::vector<std::vector<std::vector<int>>> r;
  for (int s = 0; s < 10; ++s) r.push_back({{0}, {1 + s % 2}});
  Trace t = make_trace(2, 4, 1, r);
  auto demand = sim(t, "lru", 0.25);
  EXPECT_EQ(demand.hits, 9u);  // layer 0 after its cold miss
  SimConfig c;
  c.hw = unit_hw();
  c.hw.layer_ms = 5;  // attention etc. long enough to hide a 1 ms copy
  c.policy = "lru";
  c.predictor = "oracle";
  c.oracle_lookahead = 1;
  c.cache_rate = 0.25;
  auto pf = simulate(t, c);
  EXPECT_EQ(pf.hits, 19u);  // everything but the very first use
  EXPECT_EQ(pf.prefetches, 10u);
  EXPECT_DOUBLE_EQ(pf.prefetch_accuracy, 1.0);
  EXPECT_DOUBLE_EQ(pf.in_time_rate, 1.0);
  EXPECT_DOUBLE_EQ(pf.pred_recall, 19.0 / 20.0);  // every use but the very first was predicted
  // No time to hide the copy: by default such a prefetch is not started at all (stride rule)...
  c.hw.layer_ms = 0;
  c.hw.expert_compute_ms = 0.25;
  auto skipped = simulate(t, c);
  EXPECT_EQ(skipped.prefetches, 0u);
  EXPECT_EQ(skipped.hits, 9u);
  // ...and when forced, it is still in flight when needed (late, not a hit) but shortens the stall.
  c.skip_late_prefetches = false;
  auto late = simulate(t, c);
  EXPECT_EQ(late.hits, 9u);
  EXPECT_EQ(late.late, 10u);
  EXPECT_DOUBLE_EQ(late.in_time_rate, 0.0);
  c.predictor = "none";
  EXPECT_LT(late.stall_ms, simulate(t, c).stall_ms);
}

TEST(Simulator, DemandLoadsOvertakeSpeculativeCopies) {
  // A wrong prefetch on the link must not delay a demand miss behind it by a whole transfer.
  std::vector<std::vector<std::vector<int>>> r = {{{0}, {1}}, {{0}, {2}}};
  Trace t = make_trace(2, 8, 1, r);
  SimConfig c;
  c.hw = unit_hw();
  c.policy = "lru";
  c.cache_rate = 0.5;
  c.predictor = "none";
  auto base = simulate(t, c);
  c.predictor = "oracle";  // right but immediately needed: issued while layer 0 computes
  auto o = simulate(t, c);
  EXPECT_LE(o.tpot_ms, base.tpot_ms + 1e-9);
}

// Every demand-only policy, per-layer and global budgets, on random traces with locality:
// none beats Belady (with bypass), and classic forced-admission MIN does not either.
TEST(Simulator, NoDemandOnlyPolicyBeatsBeladyOnRandomTraces) {
  std::mt19937 rng(2024);
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    int L = 1 + (int)(rng() % 3), E = 4 + (int)(rng() % 5), K = 1 + (int)(rng() % 2);
    Trace t = testing::random_trace(rng, L, E, K, 40 + (int)(rng() % 40), 1 + (int)(rng() % 3),
                                    0.3 + 0.1 * (rng() % 6));
    for (bool global : {false, true})
      for (double rate : {0.25, 0.5, 0.75}) {
        SimConfig c;
        c.hw = hw_profile("pcie4x16");
        c.cache_rate = rate;
        c.global_budget = global;
        c.hobbit_weights = {0.4, 0.3, 0.1, 0.2};
        c.policy = "belady";
        auto best = simulate(t, c);
        for (auto& p : sim_policy_names()) {
          if (p == "belady") continue;
          c.policy = p;
          auto r = simulate(t, c);
          EXPECT_LE(r.hits, best.hits)
              << p << " beats Belady: trial " << trial << " L=" << L << " E=" << E << " K=" << K
              << " rate " << rate << (global ? " global" : "");
          ++checked;
        }
      }
  }
  EXPECT_GT(checked, 300);
}

TEST(Simulator, PerfectPrefetchWithBeladyNeverLosesHitsWhenCopiesAreFree) {
  // With copies hidden entirely behind compute, Belady + perfect prediction is at least as good
  // as demand-only Belady.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    Trace t = testing::random_trace(rng, 3, 8, 2, 50, 1, 0.5);
    SimConfig c;
    c.hw = unit_hw();
    c.hw.layer_ms = 50;
    c.cache_rate = 0.5;
    c.policy = "belady";
    auto d = simulate(t, c);
    c.predictor = "oracle";
    auto p = simulate(t, c);
    EXPECT_GE(p.hits, d.hits) << trial;
  }
}

// The imperfect oracle predicts the share of the next route's experts it is told to, adds the
// wrong ones it is told to (never one the route uses, never twice), and draws the same on every
// run; at recall 1 and no wrong ones it is the perfect oracle.
TEST(Simulator, ImperfectOracleHasTheAskedRecallAndWrongGuesses) {
  std::mt19937 rng(11);
  Trace t = testing::random_trace(rng, 4, 16, 2, 600, 1, 0.5);
  struct Count {
    uint64_t routes = 0, actual = 0, right = 0, wrong = 0;
    std::vector<std::vector<int>> out;
  };
  auto run = [&](OracleQuality q) {
    auto p = make_oracle_predictor(t, 1, q);
    Count c;
    for (size_t s = 0; s < t.steps.size(); ++s) {
      const auto& routes = t.steps[s].routes;
      for (size_t i = 0; i < routes.size(); ++i) {
        std::vector<Prediction> out;
        p->on_layer({RouteEvent{routes[i].layer, (uint64_t)s, false, routes[i].experts, {}}, {}},
                    out);
        // The route predicted: the next one in the trace (same request, lookahead 1).
        const bool last = i + 1 == routes.size();
        if (last && (s + 1 == t.steps.size() || t.steps[s + 1].request != t.steps[s].request)) {
          EXPECT_TRUE(out.empty());
          continue;
        }
        const LayerRoute& next = last ? t.steps[s + 1].routes[0] : routes[i + 1];
        ++c.routes;
        c.actual += next.experts.size();
        std::vector<int> seen;
        for (const Prediction& pr : out) {
          EXPECT_EQ(pr.layer, next.layer);
          EXPECT_EQ(std::count(seen.begin(), seen.end(), pr.expert), 0) << "predicted twice";
          seen.push_back(pr.expert);
          const bool used = std::count(next.experts.begin(), next.experts.end(), pr.expert) > 0;
          (used ? c.right : c.wrong) += 1;
        }
        c.out.push_back(seen);
      }
    }
    return c;
  };
  const Count perfect = run({});
  EXPECT_EQ(perfect.right, perfect.actual);
  EXPECT_EQ(perfect.wrong, 0u);
  ASSERT_GT(perfect.routes, 2000u);

  const Count noisy = run({0.6, 1.5, 3});
  const double recall = (double)noisy.right / (double)noisy.actual;
  const double wrong = (double)noisy.wrong / (double)noisy.routes;
  EXPECT_NEAR(recall, 0.6, 0.03);
  EXPECT_NEAR(wrong, 1.5, 0.06);
  EXPECT_EQ(run({0.6, 1.5, 3}).out, noisy.out) << "not deterministic";
  EXPECT_NE(run({0.6, 1.5, 4}).out, noisy.out) << "the seed changes nothing";

  // In the simulator: a worse predictor never has more of its predictions right.
  SimConfig c;
  c.hw = hw_profile("instant");
  c.policy = "lru";
  c.predictor = "oracle";
  c.oracle_lookahead = 1;
  const SimResult good = simulate(t, c);
  c.oracle.recall = 0.5;
  c.oracle.wrong = 2;
  const SimResult bad = simulate(t, c);
  EXPECT_NEAR(good.pred_precision, 1.0, 1e-9);
  EXPECT_LT(bad.pred_precision, 0.5);
  EXPECT_LT(bad.hits, good.hits);
}

TEST(Presets, ResolveNamesThePaperConfigurations) {
  std::mt19937 rng(3);
  Trace t = testing::random_trace(rng, 4, 8, 2, 60, 2, 0.6);
  SimConfig base;
  base.hw = hw_profile("nvme-gen4");
  base.cache_rate = 0.5;
  auto p = resolve_preset("moe-infinity", t, base);
  EXPECT_EQ(p.policy, "moe-infinity");
  EXPECT_EQ(p.predictor, "eamc");
  EXPECT_EQ(resolve_preset("promoe", t, base).predictor,
            "token");  // no hidden states: the baseline
  EXPECT_EQ(resolve_preset("hobbit", t, base).policy, "hobbit");
  EXPECT_EQ(resolve_preset("daop", t, base).policy, "daop");
  EXPECT_THROW(resolve_preset("nonsense", t, base), Error);
  std::vector<SimResult> all;
  SimResult a = auto_select(t, base, &all);
  EXPECT_EQ(a.policy.rfind("auto:", 0), 0u);
  EXPECT_GT(all.size(), 10u);  // the presets and every policy x predictor pair
}

// `auto` picks the best TPOT over the presets and every policy x predictor pair *on the trace
// it is given*, so on that trace it can be no worse than a preset by construction. What it is
// worth is how its pick does on a prompt it did not see: here auto chooses on one real Mixtral
// decode trace (HumanEval prompt 1) and its pick runs on another (the two problems of
// humaneval_2); it is compared with every preset and with the best pair found in hindsight on
// that trace (auto_select there). Calibration (static/DAOP counts, predictor warm-up) is a
// third prompt for both. Measured (the simulator is deterministic), TPOT of the pick on the
// unseen trace at a 50% cache:
//   pcie4x16:  daop + duoserve, 7.4% under the best preset (daop), = hindsight
//   nvme-gen4: static + eamc, 0.06% *over* the best preset (moe-infinity), 0.8% over hindsight
//              (lfu + duoserve)
// (over the six rates of docs/simulator.md the pick is 0.6-9.5% under the best preset on
// pcie4x16, and from 0.1% under to 1.5% over it and up to 2.1% over hindsight on nvme-gen4: auto
// is not never-worse on a prompt it did not choose on.) Bounds: within 2% of the best preset and
// 3% of hindsight, and on pcie4x16 at least 5% better than every preset (a combination no preset
// offers). A pick that transfers badly fails: the worst pair on the unseen trace is ~70% slower
// than the best. Two settings only: each auto_select is ~7 s of CPU.
TEST(Presets, AutoChosenOnOnePromptHoldsOnAnother) {
  const std::string dir = MOEFLOW_SHARED_DATA "/traces/mixtral-8x7b-instruct_speculative-moe/";
  const std::string choose_path = dir + "analysis/deep_analysis/humaneval_1_routing.jsonl";
  const std::string calib_path = dir + "analysis/deep_analysis/routing_raw.jsonl";
  const std::string eval_path = dir + "routing_data_collected/humaneval_2_routing.jsonl";
  for (const std::string& f : {choose_path, calib_path, eval_path}) MOEFLOW_REQUIRE_PATH(f);
  const Trace choose = filter_steps(load_any({choose_path}), false, true);
  const Trace calib = filter_steps(load_any({calib_path}), false, true);
  const Trace eval = filter_steps(load_any({eval_path}), false, true);
  struct Case {
    const char* hw;
    double rate;
    double min_gain_over_presets;  // the pick's TPOT <= (1 - this) x the best preset's
  };
  for (const Case& k : {Case{"pcie4x16", 0.5, 0.05}, Case{"nvme-gen4", 0.5, -0.02}}) {
    SCOPED_TRACE(::testing::Message() << k.hw << " at cache rate " << k.rate);
    SimConfig base;
    base.hw = hw_profile(k.hw);
    base.cache_rate = k.rate;
    base.calibration = &calib;
    const SimResult pick = auto_select(choose, base);
    SimConfig c = base;
    c.policy = pick.policy.substr(5);  // "auto:<policy>"
    c.predictor = pick.predictor;
    const double tpot = simulate(eval, c).tpot_ms;
    double best_preset = 1e300;
    std::string best_name;
    for (const std::string& pn : preset_names()) {
      if (pn == "auto" || pn == "ondemand") continue;
      const Preset pr = resolve_preset(pn, eval, base);
      SimConfig pc = base;
      pc.policy = pr.policy;
      pc.predictor = pr.predictor;
      const double t = simulate(eval, pc).tpot_ms;
      if (t < best_preset) best_preset = t, best_name = pn;
    }
    const SimResult hindsight = auto_select(eval, base);
    std::printf(
        "%s %.0f%%: pick %s + %s, TPOT %.2f ms on the unseen trace; best preset %s %.2f; "
        "hindsight %s + %s %.2f\n",
        k.hw, k.rate * 100, c.policy.c_str(), c.predictor.c_str(), tpot, best_name.c_str(),
        best_preset, hindsight.policy.c_str(), hindsight.predictor.c_str(), hindsight.tpot_ms);
    EXPECT_LE(tpot, (1 - k.min_gain_over_presets) * best_preset) << "best preset " << best_name;
    EXPECT_LE(tpot, 1.03 * hindsight.tpot_ms) << hindsight.policy << " + " << hindsight.predictor;
  }
}

TEST(HwProfiles, BuiltInsAndJson) {
  auto p = hw_profile("pcie4x16");
  EXPECT_GT(p.expert_bytes, 9e7);
  EXPECT_NEAR(p.transfer_ms(), 0.01 + p.expert_bytes / 25e6, 1e-9);
  EXPECT_GT(hw_profile("nvme-gen4").transfer_ms(), p.transfer_ms());
  auto f = (std::filesystem::temp_directory_path() / ("hw_" + std::to_string(::getpid()) + ".json"))
               .string();
  {
    std::FILE* o = std::fopen(f.c_str(), "w");
    std::fputs("{\"name\": \"mine\", \"read_gb_s\": 2.0, \"expert_bytes\": 2e6}", o);
    std::fclose(o);
  }
  auto j = hw_profile(f);
  EXPECT_EQ(j.name, "mine");
  EXPECT_DOUBLE_EQ(j.link_gb_s, 2.0);
  EXPECT_NEAR(j.transfer_ms(), j.latency_ms + 1.0, 1e-9);
  std::filesystem::remove(f);
  EXPECT_THROW(hw_profile("no-such-profile"), Error);
}

TEST(Report, CsvAndSvg) {
  Trace t = letters("ABCABCAB");
  std::vector<SimResult> rs = {sim(t, "lru", 0.5), sim(t, "belady", 0.5), sim(t, "lru", 0.75)};
  auto csv = results_csv(rs);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_EQ(csv.rfind("policy,predictor,cache_rate,hit_rate", 0), 0u);
  auto svg = results_svg(rs, "t");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find(">belady<"), std::string::npos);
  EXPECT_NE(svg.find(">lru<"), std::string::npos);
}

// The CLI contract: `moeflow sim --json` rows, with a `belady` row and predictor `none` for
// demand-only rows.
// --oracle-* shape the oracle only: with another predictor they are refused by name, not
// ignored; with the oracle they change what it predicts.
TEST(SimCli, OracleQualityOptions) {
  std::mt19937 rng(6);
  Trace t = testing::random_trace(rng, 2, 8, 2, 60, 1, 0.5);
  auto path = (std::filesystem::temp_directory_path() /
               ("sim_oracle_" + std::to_string(::getpid()) + ".mft"))
                  .string();
  write_trace(t, path);
  auto run = [&](const std::string& args, int& rc) {
    std::string cmd = std::string(MOEFLOW_BINARY) + " sim --trace " + path +
                      " --policy lru --hw instant --json " + args + " 2>&1";
    std::FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    if (!f) return out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    rc = ::pclose(f);
    return out;
  };
  int rc = 0;
  std::string out = run("--predictor duoserve --oracle-recall 0.5", rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--predictor oracle"), std::string::npos) << out;
  out = run("--predictor oracle --oracle-recall 1.5", rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--oracle-recall"), std::string::npos) << out;
  auto precision = [&](const std::string& args) {
    int r = 0;
    std::string o = run("--predictor oracle " + args, r);
    EXPECT_EQ(r, 0) << o;
    const nlohmann::json j = nlohmann::json::parse(o);
    for (auto& row : j["results"])
      if (row["predictor"] == "oracle") return row["prediction_precision"].get<double>();
    ADD_FAILURE() << "no oracle row: " << o;
    return -1.0;
  };
  EXPECT_NEAR(precision(""), 1.0, 1e-12);
  EXPECT_LT(precision("--oracle-lookahead 1 --oracle-wrong 2"), 0.6);
  std::filesystem::remove(path);
}

TEST(SimCli, JsonContract) {
  std::mt19937 rng(5);
  Trace t = testing::random_trace(rng, 2, 8, 2, 40, 2, 0.5);
  auto path =
      (std::filesystem::temp_directory_path() / ("sim_cli_" + std::to_string(::getpid()) + ".mft"))
          .string();
  write_trace(t, path);
  std::string cmd = std::string(MOEFLOW_BINARY) + " sim --trace " + path +
                    " --policy all --predictor all --cache-rate 25,50 --hw nvme-gen4 --json 2>&1";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  std::filesystem::remove(path);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out);
  ASSERT_TRUE(j["results"].is_array());
  bool belady = false;
  double belady_hit[2] = {-1, -1};
  for (auto& row : j["results"]) {
    for (const char* k : {"policy", "predictor", "cache_rate", "hit_rate", "bytes_moved", "tpot_ms",
                          "prefetch_accuracy", "fetch_in_time_rate", "goodpred", "stall_ms"})
      EXPECT_TRUE(row.contains(k)) << k;
    int ri = row["cache_rate"].get<double>() < 0.3 ? 0 : 1;
    if (row["policy"] == "belady" && row["predictor"] == "none")
      belady = true, belady_hit[ri] = row["hit_rate"];
    if (row["predictor"] == "none") {
      EXPECT_EQ(row["prefetches"].get<int>(), 0) << row.dump();
    }
  }
  EXPECT_TRUE(belady);
  for (auto& row : j["results"])
    if (row["predictor"] == "none") {
      int ri = row["cache_rate"].get<double>() < 0.3 ? 0 : 1;
      EXPECT_LE(row["hit_rate"].get<double>(), belady_hit[ri] + 1e-12) << row.dump();
    }
}

}  // namespace
}  // namespace moeflow::trace
