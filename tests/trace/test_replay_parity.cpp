// The live engine under a replayed routing and the simulator on the same routing agree: a real
// Mixtral-8x7B trace is replayed through `moeflow bench` (the whole forward pass: MoE block,
// planner, cached provider, reads) on a model of its shape, the routing it ran is recorded
// (--trace-out), and `moeflow sim` replays that recording with the live run's cache size and
// partitioning. Without prefetching both must count the same hits and misses for every eviction
// policy (tests/trace/test_policy_parity.cpp shows the same one level down, the provider driven
// directly; this is the path `--routing-trace` measures).
//
// With prefetching on, the predictors that learn from routing history (token, duoserve, eamc;
// the others read hidden states, which a replay does not follow) run in both, and whether a
// prefetch arrives before its layer is a matter of timing, which a live run and a simulation
// cannot share. So the comparison is logical: the live engine waits for every prefetch before
// the next layer routes (--prefetch-wait, which also turns off the arrival rule and the gate,
// both timing-driven), the simulator copies in no time (--hw instant) and caps nothing
// (--max-prefetch 0, as the live engine). Then both must count the same hits, misses,
// prefetches issued and used, and experts read: the same victims, chosen at the same moments
// (a prefetch takes its place when it is issued; a batch never evicts an expert it predicts).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "policy/eviction_policy.h"
#include "support/require_data.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

const std::string kTrace = MOEFLOW_SHARED_DATA
    "/traces/mixtral-8x7b-instruct_speculative-moe/routing_data_collected/"
    "humaneval_2_routing.jsonl";

// Another HumanEval prompt of the same model: the calibration of the placement policies (static,
// daop), as the simulator tables calibrate them (an in-sample calibration would overstate them).
const std::string kCalib = MOEFLOW_SHARED_DATA
    "/traces/mixtral-8x7b-instruct_speculative-moe/analysis/deep_analysis/routing_raw.jsonl";

const std::string& mixtral_shaped() {
  static const std::string p = [] {
    TinySpec s;
    s.arch = "llama";
    s.n_layer = 32;
    s.n_expert = 8;
    s.top_k = 2;
    const std::string path = temp_path("replay_parity_32l.gguf");
    write_tiny_model(s, path);
    return path;
  }();
  return p;
}

struct Counts {
  uint64_t hits = 0, misses = 0;
  uint64_t prefetches = 0, prefetch_used = 0, reads = 0;  // reads: experts read, both kinds
};

// Live: bench's decode steps over request 1 of the trace; returns the counts and writes the
// routing it ran to `rec`, with the cache's places in `slots` (its slots less the transient ones
// through which a policy that declines misses reads them).
Counts live(const std::string& policy, double rate, bool per_layer, const std::string& rec,
            int& slots, const std::string& predictor = "none", int tokens = 96) {
  const Cmd c = run_moeflow(
      "bench -m " + mixtral_shaped() + " -p 0 -n " + std::to_string(tokens) +
          " --reps 1 -t 1 --json --routing-request 1 --routing-trace " + kTrace + " --cache-rate " +
          std::to_string(rate) + " --cache-policy " + policy + " --prefetch " + predictor +
          (predictor == "none" ? "" : " --prefetch-wait") +
          (per_layer ? " --cache-per-layer" : "") +
          (eviction_policy_needs_calibration(policy) ? " --policy-calib " + kCalib : "") +
          " --trace-out " + rec,
      /*merge_stderr=*/false);
  EXPECT_EQ(c.rc, 0) << c.out;
  const nlohmann::json j = last_json_line(c.out);
  slots = j["offload"]["n_slots"].get<int>() - j["offload"]["n_transient_slots"].get<int>();
  const nlohmann::json& t = j["offload"]["total"];
  Counts r;
  r.hits = t["hits"];
  r.misses = t["misses"].get<uint64_t>() + t["late"].get<uint64_t>();
  r.prefetches = t["prefetch_issued"];
  r.prefetch_used = t["prefetch_used"];
  // Experts read, demand and speculative: every read is a whole expert of three matrices.
  EXPECT_EQ(t["chunks_read"].get<uint64_t>() % 3, 0u);
  r.reads = t["chunks_read"].get<uint64_t>() / 3;
  return r;
}

Counts simulated(const std::string& policy, int slots, bool per_layer, const std::string& rec,
                 const std::string& predictor = "none") {
  // The live cache's exact size as a rate of all 32 x 8 experts.
  const double rate = slots / 256.0;
  // hobbit: the live policy's default weights (the simulator otherwise fits them in hindsight
  // on the trace itself).
  const std::string weights = policy == "hobbit" ? " --hobbit-weights 0.4 0.3 0.1 0.2" : "";
  // The live policy counts every step of its calibration trace; the simulator keeps the prompt
  // steps of its --calib only with --with-prefill (which changes nothing else here: `rec` has no
  // prompt, bench ran -p 0).
  const std::string calib =
      eviction_policy_needs_calibration(policy) ? " --with-prefill --calib " + kCalib : "";
  const Cmd c = run_moeflow("sim -t " + rec + " --policy " + policy + " --predictor " + predictor +
                                weights + calib + " --cache-rate " + std::to_string(rate) +
                                (per_layer ? "" : " --global-budget") +
                                " --hw instant --max-prefetch 0 --json",
                            /*merge_stderr=*/false);
  EXPECT_EQ(c.rc, 0) << c.out;
  const nlohmann::json row = nlohmann::json::parse(c.out)["results"][0];  // stdout is the JSON
  // The simulator reports a per-layer budget's capacity per layer.
  EXPECT_EQ(row["capacity"].get<int>() * (per_layer ? 32 : 1), slots) << row.dump();
  const uint64_t uses = row["uses"], hits = row["hits"];
  Counts r{hits, uses - hits};
  r.prefetches = row["prefetches"];
  r.prefetch_used = row["prefetch_used"];
  r.reads = row["demand_loads"].get<uint64_t>() + r.prefetches;
  EXPECT_EQ(row["late_prefetch_hits"].get<uint64_t>(), 0u);  // copies take no time
  return r;
}

TEST(ReplayParity, LiveEngineAndSimulatorCountTheSameHitsForEveryPolicy) {
  MOEFLOW_REQUIRE_PATH(kTrace);
  const std::string rec = temp_path("replay_parity.mft");
  MOEFLOW_REQUIRE_PATH(kCalib);
  // static and daop: their placement from kCalib, which bench reads before it times decode (and
  // the simulator starts with it in place).
  for (const char* policy : {"lru", "lfu", "lfu-cycle", "moe-infinity", "hobbit", "static", "daop"})
    for (double rate : {0.375, 0.625})
      for (bool per_layer : {false, true}) {
        // daop streams its misses through top-k transient slots outside its places: 3 slots
        // per layer leave it 1 place, fewer than top-k (refused by name, not compared).
        if (std::string(policy) == "daop" && per_layer && rate < 0.5) continue;
        SCOPED_TRACE(std::string(policy) + " rate " + std::to_string(rate) +
                     (per_layer ? " per layer" : " global"));
        int slots = 0;
        const Counts l = live(policy, rate, per_layer, rec, slots);
        const Counts s = simulated(policy, slots, per_layer, rec);
        // Budgets above one token's 64 experts: below it a global LRU evicts every expert
        // before its next use (0 hits both ways, a comparison that shows nothing).
        EXPECT_GT(l.hits, 0u);
        EXPECT_GT(l.misses, 0u);
        EXPECT_EQ(l.hits, s.hits);
        EXPECT_EQ(l.misses, s.misses);
      }
}

// Prefetching on (see the top): each history predictor with a recency, a frequency and a
// scored policy, global and per layer, at 37.5% of the experts, over 48 tokens (a second apiece:
// the live run waits for every read).
TEST(ReplayParity, WithPrefetchingTheLiveEngineAndSimulatorCountTheSame) {
  MOEFLOW_REQUIRE_PATH(kTrace);
  const std::string rec = temp_path("replay_parity_prefetch.mft");
  struct Case {
    const char* predictor;
    const char* policy;
    bool per_layer;
  };
  for (const Case& k : {Case{"token", "lru", false}, Case{"duoserve", "lru", false},
                        Case{"eamc", "lru", false}, Case{"duoserve", "lfu", true},
                        Case{"token", "moe-infinity", false}, Case{"eamc", "hobbit", true}}) {
    SCOPED_TRACE(std::string(k.predictor) + " + " + k.policy +
                 (k.per_layer ? " per layer" : " global"));
    int slots = 0;
    const Counts l = live(k.policy, 0.375, k.per_layer, rec, slots, k.predictor, 48);
    const Counts s = simulated(k.policy, slots, k.per_layer, rec, k.predictor);
    // Prefetching happened and mattered: prefetched experts were used.
    EXPECT_GT(l.prefetches, 0u);
    EXPECT_GT(l.prefetch_used, 0u);
    EXPECT_GT(l.misses, 0u);
    EXPECT_EQ(l.hits, s.hits);
    EXPECT_EQ(l.misses, s.misses);
    EXPECT_EQ(l.prefetches, s.prefetches);
    EXPECT_EQ(l.prefetch_used, s.prefetch_used);
    EXPECT_EQ(l.reads, s.reads);
  }
}

}  // namespace
}  // namespace moeflow::test
