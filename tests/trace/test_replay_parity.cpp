// The live engine under a replayed routing and the simulator on the same routing agree: a real
// Mixtral-8x7B trace is replayed through `moeflow bench` (the whole forward pass: MoE block,
// planner, cached provider, reads) on a model of its shape, the routing it ran is recorded
// (--trace-out), and `moeflow sim` replays that recording with the live run's cache size and
// partitioning. Without prefetching both must count the same hits and misses for every eviction
// policy (tests/trace/test_policy_parity.cpp shows the same one level down, the provider driven
// directly; this is the path `--routing-trace` measures).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "support/require_data.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

const std::string kTrace = MOEFLOW_SHARED_DATA
    "/traces/mixtral-8x7b-instruct_speculative-moe/routing_data_collected/"
    "humaneval_2_routing.jsonl";

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
};

// Live: bench's decode steps over request 1 of the trace; returns the counts and writes the
// routing it ran to `rec`, with the cache's slot count in `slots`.
Counts live(const std::string& policy, double rate, bool per_layer, const std::string& rec,
            int& slots) {
  const Cmd c = run_moeflow("bench -m " + mixtral_shaped() +
                                " -p 0 -n 96 --reps 1 -t 1 --json --routing-request 1 "
                                "--routing-trace " +
                                kTrace + " --cache-rate " + std::to_string(rate) +
                                " --cache-policy " + policy + " --prefetch none" +
                                (per_layer ? " --cache-per-layer" : "") + " --trace-out " + rec,
                            /*merge_stderr=*/false);
  EXPECT_EQ(c.rc, 0) << c.out;
  const nlohmann::json j = last_json_line(c.out);
  slots = j["offload"]["n_slots"];
  const nlohmann::json& t = j["offload"]["total"];
  return {t["hits"], t["misses"].get<uint64_t>() + t["late"].get<uint64_t>()};
}

Counts simulated(const std::string& policy, int slots, bool per_layer, const std::string& rec) {
  // The live cache's exact size as a rate of all 32 x 8 experts.
  const double rate = slots / 256.0;
  // hobbit: the live policy's default weights (the simulator otherwise fits them in hindsight
  // on the trace itself).
  const std::string weights = policy == "hobbit" ? " --hobbit-weights 0.4 0.3 0.1 0.2" : "";
  const Cmd c = run_moeflow("sim -t " + rec + " --policy " + policy + " --predictor none" +
                                weights + " --cache-rate " + std::to_string(rate) +
                                (per_layer ? "" : " --global-budget") + " --json",
                            /*merge_stderr=*/false);
  EXPECT_EQ(c.rc, 0) << c.out;
  const nlohmann::json row = nlohmann::json::parse(c.out)["results"][0];  // stdout is the JSON
  // The simulator reports a per-layer budget's capacity per layer.
  EXPECT_EQ(row["capacity"].get<int>() * (per_layer ? 32 : 1), slots) << row.dump();
  const uint64_t uses = row["uses"], hits = row["hits"];
  return {hits, uses - hits};
}

TEST(ReplayParity, LiveEngineAndSimulatorCountTheSameHitsForEveryPolicy) {
  MOEFLOW_REQUIRE_PATH(kTrace);
  const std::string rec = temp_path("replay_parity.mft");
  for (const char* policy : {"lru", "lfu", "lfu-cycle", "moe-infinity", "hobbit"})
    for (double rate : {0.375, 0.625})
      for (bool per_layer : {false, true}) {
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

}  // namespace
}  // namespace moeflow::test
