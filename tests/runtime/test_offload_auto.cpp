// `--cache-policy auto`: which policy and partitioning it resolves to, and the measurement the
// rule rests on, repeated on the real routing traces in ../shared/data: at one global budget
// lfu-cycle hits at least as often as LFU. (With per-layer budgets the layer-distance term is the
// same for every candidate and the two are within a point of each other; auto keeps LFU there.)
#include <gtest/gtest.h>

#include "runtime/offload_auto.h"
#include "support/require_data.h"
#include "trace/importers.h"
#include "trace/simulator.h"

namespace moeflow {
namespace {

constexpr uint64_t kSlot = 100;

TEST(AutoPolicy, PerLayerLfuWhenEveryLayerGetsItsTopKElseLfuCycleOverOneBudget) {
  struct Case {
    const char* policy;
    bool per_layer;
    uint64_t slots;
    int moe_layers;
    const char* want;
    bool want_per_layer;
  };
  // top-2 everywhere: 4 MoE layers need 8 slots to split.
  const Case cases[] = {
      {"auto", false, 12, 4, "lfu", true},
      {"auto", false, 8, 4, "lfu", true},
      {"auto", false, 7, 4, "lfu-cycle", false},
      {"auto", true, 7, 4, "lfu", true},            // --cache-per-layer asked for keeps LFU
      {"auto", false, 100, 0, "lfu-cycle", false},  // no partitioning (low-precision modes)
      {"lru", false, 7, 4, "lru", false},           // an explicit policy is used as given
  };
  for (const Case& c : cases) {
    const AutoPolicy p =
        resolve_auto_policy(c.policy, c.per_layer, c.slots * kSlot, kSlot, 2, c.moe_layers);
    EXPECT_EQ(p.policy, c.want) << c.policy << " with " << c.slots << " slots";
    EXPECT_EQ(p.per_layer, c.want_per_layer) << c.policy << " with " << c.slots << " slots";
  }
}

double hit_rate(const trace::Trace& t, const std::string& policy, double rate, bool global) {
  trace::SimConfig c;
  c.hw = trace::hw_profile("pcie4x16");  // hits do not depend on it (no prefetching)
  c.policy = policy;
  c.predictor = "none";
  c.cache_rate = rate;
  c.global_budget = global;
  return trace::simulate(t, c).hit_rate;
}

void check_rule(const trace::Trace& decode, const char* what) {
  for (double rate : {0.0625, 0.125, 0.25, 0.5}) {
    SCOPED_TRACE(testing::Message() << what << " at cache rate " << rate);
    const double lfu_global = hit_rate(decode, "lfu", rate, true);
    const double cycle_global = hit_rate(decode, "lfu-cycle", rate, true);
    EXPECT_GE(cycle_global, lfu_global);
  }
  // Where places are scarce the difference is not noise (measured: 16.3% -> 17.4% of the
  // Mixtral trace's uses at 1/8, 15.5% -> 18.1% of Qwen1.5's).
  EXPECT_GT(hit_rate(decode, "lfu-cycle", 0.125, true), hit_rate(decode, "lfu", 0.125, true) + 0.01)
      << what;
}

TEST(AutoPolicy, LfuCycleBeatsLfuAtGlobalBudgetsOnRealMixtralRouting) {
  const std::string path = MOEFLOW_SHARED_DATA
      "/traces/mixtral-8x7b-instruct_speculative-moe/routing_data_collected/"
      "humaneval_2_routing.jsonl";
  MOEFLOW_REQUIRE_PATH(path);
  check_rule(trace::filter_steps(trace::load_any({path}), false, true), "Mixtral-8x7B");
}

TEST(AutoPolicy, LfuCycleBeatsLfuAtGlobalBudgetsOnRealQwenRouting) {
  const std::string dir = MOEFLOW_SHARED_DATA "/traces/qwen1.5-moe_vllm-logger_weiran0129/";
  std::vector<std::string> files;
  for (const char* l : {"0", "12", "18", "23"}) files.push_back(dir + "moe_layer" + l + ".jsonl");
  for (const std::string& f : files) MOEFLOW_REQUIRE_PATH(f);
  check_rule(trace::filter_steps(trace::load_any(files), false, true), "Qwen1.5-MoE");
}

}  // namespace
}  // namespace moeflow
