// `moeflow trace` and the TraceRecorder: what they record must be what the model routed. The
// reference is the model's own router applied to the recorded hidden state (top-k of the
// router logits, Mixtral's softmax over the chosen k), computed here independently of the
// MoE block's routing code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"
#include "tokenizer/tokenizer.h"
#include "trace/hw_profile.h"
#include "trace/recorder.h"
#include "trace/simulator.h"
#include "trace/trace.h"

// A namespace of its own: the unity builds (MOEFLOW_UNITY) compile this file in one unit with
// others of its folder that define helpers of the same names.
namespace moeflow::test::trace_recorder {
namespace {

using trace::Phase;

// Counts the calls it sees, to check the recorder forwards everything to a chained observer.
struct CountingObserver : ForwardObserver {
  int begins = 0, routes = 0, ends = 0;
  void on_step_begin(int64_t, int) override { ++begins; }
  void on_route(const RouteRecord&) override { ++routes; }
  void on_step_end() override { ++ends; }
};

TEST(TraceRecorder, RecordsWhatTheRouterChoosesForEveryTokenAndLayer) {
  TinySpec spec;  // llama arch with experts = Mixtral routing (softmax over the chosen k)
  spec.n_layer = 3;
  const std::string path = temp_path("recorder.gguf");
  write_tiny_model(spec, path);
  EngineOptions opt;
  opt.n_threads = 2;
  Engine eng(path, opt);

  trace::Trace t;
  t.n_layers = spec.n_layer;
  t.n_experts = spec.n_expert;
  t.top_k = spec.top_k;
  t.hidden_dim = (int)spec.n_embd;
  CountingObserver next;
  trace::TraceRecorder rec(t, 1, &next);
  eng.context().set_observer(&rec);

  const std::vector<int32_t> prompt = {1, 5, 9, 17, 33};
  for (int request = 0; request < 2; ++request) {
    eng.reset();
    rec.begin_request(Phase::prefill);
    eng.prefill(prompt, false, nullptr);
    rec.set_phase(Phase::decode);
    for (int32_t tok : {40, 41, 42}) eng.decode(tok);
  }
  eng.context().set_observer(nullptr);

  ASSERT_EQ(t.steps.size(), 2u * (prompt.size() + 3));
  EXPECT_EQ(next.routes, 2 * (1 + 3) * spec.n_layer);  // one route call per layer per step
  EXPECT_EQ(next.begins, next.ends);
  t.validate("recorded");
  std::vector<float> logits;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const trace::TokenStep& s = t.steps[i];
    const size_t in_req = i % (prompt.size() + 3);
    EXPECT_EQ(s.request, i / (prompt.size() + 3));
    EXPECT_EQ(s.phase, in_req < prompt.size() ? Phase::prefill : Phase::decode);
    EXPECT_EQ(s.pos, in_req < prompt.size() ? in_req : in_req - prompt.size());
    EXPECT_EQ(s.token_id,
              in_req < prompt.size() ? prompt[in_req] : 40 + (int)(in_req - prompt.size()));
    ASSERT_EQ(s.routes.size(), (size_t)spec.n_layer);
    for (const trace::LayerRoute& r : s.routes) {
      ASSERT_EQ(r.hidden.size(), (size_t)spec.n_embd);
      eng.model().router_logits(r.layer, r.hidden, logits);
      std::vector<int> order(spec.n_expert);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return logits[a] > logits[b]; });
      ASSERT_EQ(r.experts.size(), (size_t)spec.top_k);
      double z = 0;
      for (int k = 0; k < spec.top_k; ++k)
        z += std::exp((double)logits[order[k]] - logits[order[0]]);
      for (int k = 0; k < spec.top_k; ++k) {
        EXPECT_EQ(r.experts[k], order[k]) << "step " << i << " layer " << r.layer << " rank " << k;
        EXPECT_NEAR(r.weights[k], std::exp((double)logits[order[k]] - logits[order[0]]) / z, 1e-5);
      }
    }
  }
}

TEST(TraceRecorder, HiddenEveryKKeepsOnlyThoseTokens) {
  TinySpec spec;
  const std::string path = temp_path("recorder_k.gguf");
  write_tiny_model(spec, path);
  Engine eng(path, EngineOptions{});
  trace::Trace t;
  trace::TraceRecorder rec(t, 3);
  eng.context().set_observer(&rec);
  rec.begin_request(Phase::prefill);
  eng.prefill(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}, false, nullptr);
  eng.context().set_observer(nullptr);
  ASSERT_EQ(t.steps.size(), 7u);
  for (size_t i = 0; i < t.steps.size(); ++i)
    for (const auto& r : t.steps[i].routes) EXPECT_EQ(r.hidden.empty(), i % 3 != 0) << i;
  EXPECT_THROW({ trace::TraceRecorder bad(t, -1); }, Error);
}

class TraceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = temp_path("trace_cli.gguf");
    const Cmd c = run_moeflow("gen-model --arch mixtral --preset tiny -q -o '" + model_ + "'");
    ASSERT_EQ(c.rc, 0) << c.out;
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = temp_path(name);
    std::ofstream(p) << text;
    return p;
  }
  std::string model_;
};

TEST_F(TraceCli, RecordsRequestsPhasesAndHiddenStatesThatTheSimulatorReplays) {
  // JSON lines ("prompt" or "text"); the plain-text form is checked in PlainTextPrompts...
  const std::vector<std::string> texts = {"hello world", "the cat", "some more text here"};
  const std::string prompts = write("prompts.jsonl",
                                    "{\"prompt\": \"hello world\"}\n\n{\"text\": \"the cat\"}\n"
                                    "{\"prompt\": \"some more text here\", \"id\": 3}\n");
  const std::string out = temp_path("cli.trace");
  const int n = 5;
  const Cmd c = run_moeflow("trace -m '" + model_ + "' --prompts '" + prompts + "' -o '" + out +
                            "' -n " + std::to_string(n) + " --hidden --routers --ignore-eos -t 2");
  ASSERT_EQ(c.rc, 0) << c.out;
  const trace::Trace t = trace::read_trace(out);
  EXPECT_GT(t.hidden_dim, 0);
  ASSERT_EQ((int)t.routers.size(), t.n_layers);
  std::vector<int> decode_steps(3, 0), prefill_steps(3, 0);
  for (const auto& s : t.steps) {
    ASSERT_LT(s.request, 3u);
    (s.phase == Phase::decode ? decode_steps : prefill_steps)[s.request]++;
    EXPECT_EQ((int)s.routes.size(), t.n_layers);
    for (const auto& r : s.routes) EXPECT_EQ((int)r.hidden.size(), t.hidden_dim);
  }
  // Prefill: the prompt's tokens as the model's tokenizer encodes them (with BOS); decode: the
  // n - 1 forwards that produce tokens 2..n (prefill's logits give the first; the last sampled
  // token is not fed back).
  const std::unique_ptr<GgufFile> f = GgufFile::open(model_);
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*f);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(prefill_steps[r], (int)tok->encode(texts[r], true).size()) << r;
    EXPECT_EQ(decode_steps[r], n - 1) << r;
  }
  trace::SimConfig cfg;
  cfg.policy = "lru";
  cfg.cache_rate = 0.5;
  cfg.hw = trace::hw_profile("pcie4x16");
  const trace::SimResult res = trace::simulate(t, cfg);
  EXPECT_GT(res.hit_rate, 0.0);
  EXPECT_LE(res.hit_rate, 1.0);
}

TEST_F(TraceCli, PlainTextPromptsAreOnePerLineVerbatimEvenWhenTheyStartWithABrace) {
  const std::vector<std::string> texts = {"hello world", "{not json: \\frac{a}{b}", "x"};
  const std::string prompts =
      write("plain.txt", texts[0] + "\n\n" + texts[1] + "\r\n" + texts[2] + "\n");
  const std::string out = temp_path("plain.trace");
  const Cmd c = run_moeflow("trace -m '" + model_ + "' --prompts '" + prompts + "' -o '" + out +
                            "' -n 1 -t 2");
  ASSERT_EQ(c.rc, 0) << c.out;
  const trace::Trace t = trace::read_trace(out);
  EXPECT_EQ(t.hidden_dim, 0);
  const std::unique_ptr<GgufFile> f = GgufFile::open(model_);
  const std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*f);
  std::vector<int> prefill_steps(3, 0);
  for (const auto& s : t.steps) {
    ASSERT_LT(s.request, 3u);
    EXPECT_EQ(s.phase, Phase::prefill);  // -n 1: the first token comes from the prefill logits
    for (const auto& r : s.routes) EXPECT_TRUE(r.hidden.empty());
    prefill_steps[s.request]++;
  }
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(prefill_steps[r], (int)tok->encode(texts[r], true).size()) << texts[r];
}

TEST_F(TraceCli, BadInputsAreClearErrors) {
  const std::string out = temp_path("bad.trace");
  const std::string empty = write("empty.txt", "\n  \n");
  const std::string badjson = write("bad.jsonl", "{\"prompt\": \n");
  const std::string nokey = write("nokey.jsonl", "{\"q\": \"x\"}\n");
  const std::string mixed = write("mixed.txt", "{\"prompt\": \"a\"}\nplain text\n");
  const std::string good = write("good.txt", "hello\n");
  struct Case {
    std::string args, expect;
  };
  for (const Case& k : {Case{"--prompts /nonexistent/p.txt", "cannot open"},
                        Case{"--prompts '" + empty + "'", "no prompts"},
                        Case{"--prompts '" + badjson + "'", "line 1"},
                        Case{"--prompts '" + nokey + "'", "\"prompt\""},
                        Case{"--prompts '" + mixed + "'", "line 2: not a JSON object"},
                        Case{"--prompts '" + empty + "' --hidden-every -1", "--hidden-every"},
                        Case{"--prompts '" + good + "' --routers", "--routers needs hidden"}}) {
    const Cmd c = run_moeflow("trace -m '" + model_ + "' -o '" + out + "' " + k.args);
    EXPECT_NE(c.rc, 0) << k.args;
    EXPECT_NE(c.out.find(k.expect), std::string::npos) << k.args << ": " << c.out;
  }
}

}  // namespace
}  // namespace moeflow::test::trace_recorder
