// `--routing-trace` through the CLI (trace/routing_replay.h): the routing a run executes is the
// trace's (recorded again behind the replay, it equals the source), a real Mixtral-8x7B trace
// replays on a model of its shape with the cache and prefetcher live, and a trace of another
// shape, a run longer than the trace or a hidden-state predictor are clear errors.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "support/require_data.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"
#include "trace/trace.h"

namespace moeflow::test {
namespace {

std::string tiny(const std::string& name, int n_layer, uint32_t seed) {
  TinySpec s;
  s.arch = "llama";  // Mixtral's GGUF architecture
  s.n_layer = n_layer;
  s.n_expert = 8;
  s.top_k = 2;
  s.seed = seed;
  const std::string p = temp_path(name);
  write_tiny_model(s, p);
  return p;
}

// The experts of every (step, layer) of a trace's first request, in order.
std::vector<std::vector<int>> routes_of(const trace::Trace& t) {
  std::vector<std::vector<int>> v;
  for (const trace::TokenStep& s : t.steps)
    if (s.request == t.steps.front().request)
      for (const trace::LayerRoute& r : s.routes) v.push_back(r.experts);
  return v;
}

TEST(ReplayCli, TheReplayedRoutingIsWhatTheEngineRuns) {
  const std::string a = tiny("replay_a.gguf", 4, 1), b = tiny("replay_b.gguf", 4, 2);
  const std::string ta = temp_path("replay_a.trace"), tb = temp_path("replay_b.trace"),
                    tb_own = temp_path("replay_b_own.trace");
  const std::string bench = " -p 12 -n 0 --reps 1 -t 1 --trace-out ";
  Cmd c = run_moeflow("bench -m " + a + bench + ta);
  ASSERT_EQ(c.rc, 0) << c.out;
  c = run_moeflow("bench -m " + b + bench + tb_own);
  ASSERT_EQ(c.rc, 0) << c.out;
  c = run_moeflow("bench -m " + b + bench + tb + " --routing-trace " + ta + " --json");
  ASSERT_EQ(c.rc, 0) << c.out;
  const auto src = routes_of(trace::read_trace(ta));
  ASSERT_EQ(src.size(), 12u * 4u);
  EXPECT_NE(routes_of(trace::read_trace(tb_own)), src) << "two seeds routed alike: no signal";
  EXPECT_EQ(routes_of(trace::read_trace(tb)), src);
  const nlohmann::json j = last_json_line(c.out);
  EXPECT_EQ(j["routing_replay"]["routes_replayed"], 12 * 4);
  EXPECT_EQ(j["routing_replay"]["routes_own"], 0);
  EXPECT_EQ(j["routing_replay"]["prompt_rows"], 12);
}

TEST(ReplayCli, RealMixtralTraceReplaysWithTheCacheLive) {
  const std::string trace = MOEFLOW_SHARED_DATA
      "/traces/mixtral-8x7b-instruct_speculative-moe/routing_data_collected/"
      "humaneval_2_routing.jsonl";
  MOEFLOW_REQUIRE_PATH(trace);
  const std::string m = tiny("replay_mixtral32.gguf", 32, 3);
  // Request 1 (255 decode tokens), 40 of them, with an expert cache of half the experts and a
  // routing-history predictor.
  Cmd c = run_moeflow("bench -m " + m + " -p 0 -n 40 --reps 1 -t 1 --cache-rate 0.5 --prefetch " +
                      "duoserve --routing-request 1 --json --routing-trace " + trace);
  ASSERT_EQ(c.rc, 0) << c.out;
  nlohmann::json j = last_json_line(c.out);
  const nlohmann::json& r = j["routing_replay"];
  EXPECT_EQ(r["prompt_rows"], 0);
  EXPECT_EQ(r["decode_rows"], 255);
  EXPECT_EQ(r["request"], 1);
  // "A few tokens miss some layers": nearly every route is the trace's.
  const int replayed = r["routes_replayed"], own = r["routes_own"];
  EXPECT_EQ(replayed + own, 40 * 32);
  EXPECT_GT(replayed, 40 * 32 * 9 / 10);
  EXPECT_GT(j["offload"]["total"]["hits"].get<double>(), 0);
  // Without a --prefetch the default under replay is none (lookahead reads hidden states).
  c = run_moeflow("bench -m " + m + " -p 0 -n 8 --reps 1 -t 1 --cache-rate 0.5 --json " +
                  "--routing-trace " + trace);
  ASSERT_EQ(c.rc, 0) << c.out;
  j = last_json_line(c.out);
  EXPECT_EQ(j["offload"]["prefetch"], "none") << j["offload"].dump();
}

TEST(ReplayCli, MismatchesAreClearErrors) {
  const std::string a = tiny("replay_err.gguf", 4, 1);
  const std::string ta = temp_path("replay_err.trace");
  ASSERT_EQ(run_moeflow("bench -m " + a + " -p 6 -n 0 --reps 1 -t 1 --trace-out " + ta).rc, 0);
  // Another shape: the 4-layer trace on a 2-layer model.
  const std::string two = tiny("replay_err2.gguf", 2, 1);
  Cmd c = run_moeflow("bench -m " + two + " -p 6 -n 0 --routing-trace " + ta);
  EXPECT_EQ(c.rc, 1) << c.out;
  EXPECT_NE(c.out.find("recorded on 4 layers, 8 experts, top-2"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("the model has 2 layers"), std::string::npos) << c.out;
  // Longer than the request: 6 rows, -p 7.
  c = run_moeflow("bench -m " + a + " -p 7 -n 0 --routing-trace " + ta);
  EXPECT_EQ(c.rc, 1) << c.out;
  EXPECT_NE(c.out.find("has 6 rows"), std::string::npos) << c.out;
  // The trace has no decode rows.
  c = run_moeflow("bench -m " + a + " -p 0 -n 2 --routing-trace " + ta);
  EXPECT_EQ(c.rc, 1) << c.out;
  EXPECT_NE(c.out.find("0 decode rows"), std::string::npos) << c.out;
  // run: the prompt must have the recorded length.
  c = run_moeflow("run -m " + a + " -p ids:1,2,3 -n 1 --routing-trace " + ta);
  EXPECT_EQ(c.rc, 1) << c.out;
  EXPECT_NE(c.out.find("prompt of 6 tokens"), std::string::npos) << c.out;
  c = run_moeflow("run -m " + a + " -p ids:1,2,3,4,5,6 -n 1 --temp 0 --routing-trace " + ta);
  EXPECT_EQ(c.rc, 0) << c.out;
  EXPECT_NE(c.out.find("routing replayed from"), std::string::npos) << c.out;
  // Usage errors, before the model is opened: a hidden-state predictor, a missing file.
  c = run_moeflow("bench -m /nonexistent.gguf --prefetch gate --routing-trace " + ta);
  EXPECT_EQ(c.rc, 2) << c.out;
  EXPECT_NE(c.out.find("not meaningful under replay"), std::string::npos) << c.out;
  c = run_moeflow("bench -m /nonexistent.gguf --routing-trace /nonexistent.trace");
  EXPECT_EQ(c.rc, 2) << c.out;
  c = run_moeflow("bench -m /nonexistent.gguf --routing-request 1");
  EXPECT_EQ(c.rc, 2) << c.out;
  EXPECT_NE(c.out.find("--routing-request"), std::string::npos) << c.out;
  // Commands that serve several sequences do not take it.
  EXPECT_EQ(run_moeflow("serve -m " + a + " --routing-trace " + ta).rc, 2);
}

}  // namespace
}  // namespace moeflow::test
