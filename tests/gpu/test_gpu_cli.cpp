// `moeflow run` and `moeflow bench --json` through a device backend, as a user runs them: on
// the stand-in device here (and the same commands on a GPU in scripts/gpu-check.sh). What the
// device path owes the user: it finishes, its output is the CPU's (the stand-in computes with
// the CPU's arithmetic), the bench JSON carries the VRAM section (plan, pinned bandwidth, copy
// statistics of a VRAM cache), and a device too small says so in one line with exit 1.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "support/run_binary.h"
#include "support/test_helpers.h"

namespace moeflow::test {
namespace {

const std::string& model() {
  static const std::string path = [] {
    const std::string p = temp_path("standin_cli_" + std::to_string(getpid()) + ".gguf");
    const Cmd c =
        run_moeflow("gen-model --arch mixtral --preset small --type Q8_0 --seed 7 -q -o " + p);
    EXPECT_EQ(c.rc, 0) << c.out;
    return p;
  }();
  return path;
}

TEST(StandInCli, RunGivesTheCpuText) {
  const std::string args =
      " -m " + model() + " -p 'Once upon a time' -n 12 --temp 0 -t 2 --stats none";
  const Cmd cpu = run_moeflow("run --backend cpu" + args, false);
  const Cmd dev = run_moeflow("run --backend standin" + args, false);
  ASSERT_EQ(cpu.rc, 0) << cpu.out;
  ASSERT_EQ(dev.rc, 0) << dev.out;
  EXPECT_FALSE(cpu.out.empty());
  EXPECT_EQ(dev.out, cpu.out);
}

TEST(StandInCli, BenchJsonEveryExpertInVram) {
  const Cmd c = run_moeflow(
      "bench --backend standin -m " + model() + " -p 16 -n 8 --reps 1 -t 2 --json", false);
  ASSERT_EQ(c.rc, 0) << c.out;
  const nlohmann::json j = last_json_line(c.out);
  EXPECT_EQ(j["backend"], "standin");
  EXPECT_GT(j["prefill_tps"].get<double>(), 0);
  EXPECT_GT(j["decode_tps"].get<double>(), 0);
  ASSERT_TRUE(j.contains("vram")) << j.dump();
  EXPECT_FALSE(j["vram"]["expert_cache"].get<bool>());
  EXPECT_GT(j["vram"]["pinned_h2d_gbps"].get<double>(), 0);
  EXPECT_GT(j["vram"]["used_bytes"].get<double>(), j["expert_bytes"].get<double>());
  ASSERT_TRUE(j.contains("standin")) << j.dump();
  // Every expert in VRAM: a decode token copies nothing in and waits for the device a bounded
  // number of times (once per MoE layer for its routing, and once for the logits).
  EXPECT_EQ(j["standin"]["lane_copies_per_token"].get<double>(), 0);
  EXPECT_GT(j["standin"]["syncs_per_token"].get<double>(), 0);
  EXPECT_LE(j["standin"]["syncs_per_token"].get<double>(), 4 * 2 + 2);
}

TEST(StandInCli, BenchJsonVramCache) {
  // 4 MiB of VRAM for experts: a cache of a few of the 32 experts (slots of ~0.8 MiB).
  const Cmd c = run_moeflow("bench --backend standin -m " + model() +
                                " -p 16 -n 8 --reps 1 -t 2 --json --vram-budget 4MiB",
                            false);
  ASSERT_EQ(c.rc, 0) << c.out;
  const nlohmann::json j = last_json_line(c.out);
  ASSERT_TRUE(j.contains("vram")) << j.dump();
  EXPECT_TRUE(j["vram"]["expert_cache"].get<bool>());
  EXPECT_EQ(j["vram"]["budget_bytes"].get<uint64_t>(), 4ull << 20);
  EXPECT_GT(j["vram"]["copy_gbps"].get<double>(), 0);
  EXPECT_GT(j["standin"]["lane_copies_per_token"].get<double>(), 0);
}

TEST(StandInCli, AVramTooSmallIsOneClearError) {
  // 1 MiB of VRAM cannot hold the model's other weights, let alone one layer's experts.
  const std::string m = model();
  setenv("MOEFLOW_STANDIN_VRAM", "1MiB", 1);
  const Cmd c = run_moeflow("bench --backend standin -m " + m + " -p 4 -n 2 --reps 1 --json");
  unsetenv("MOEFLOW_STANDIN_VRAM");
  EXPECT_EQ(c.rc, 1) << c.out;
  EXPECT_NE(c.out.find("VRAM"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("terminate"), std::string::npos) << c.out;
}

}  // namespace
}  // namespace moeflow::test
