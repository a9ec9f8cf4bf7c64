// The simulator's predictors in the live engine (policy/predictor_prefetch): the observer must
// hand the predictor every routed token the way the simulator does and queue exactly its
// predictions as LOW prefetches; end to end, `moeflow run --prefetch promoe` (and every other
// predictor) must keep the generated text bit-identical to the all-resident run while it
// actually prefetches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "policy/predictor_prefetch.h"
#include "policy/predictors.h"
#include "policy/promoe_mlp.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"

namespace moeflow::test {
namespace {

struct PrefetchCall {
  int layer, expert;
  float confidence;
};

// Records the speculative loads it is asked for; serves nothing.
struct RecordingProvider : ExpertProvider {
  std::vector<PrefetchCall> calls;
  ExpertView acquire(int, int, Precision) override { return {}; }
  void prefetch(int layer, std::span<const int> experts, float confidence, Precision) override {
    for (int e : experts) calls.push_back({layer, e, confidence});
  }
};

// Records what it is fed and predicts expert (token id % 4) of layer + 1 with confidence
// 0.1 * (layer + 1).
struct ProbePredictor : Predictor {
  struct Seen {
    int layer;
    uint64_t step;
    int token;
    size_t hidden;
    std::vector<int> experts;
  };
  std::vector<Seen>* seen;
  int* sequences;
  ProbePredictor(std::vector<Seen>* s, int* q) : seen(s), sequences(q) {}
  std::string name() const override { return "probe"; }
  void on_sequence_start() override { ++*sequences; }
  void on_layer(const PredictorInput& in, std::vector<Prediction>& out) override {
    seen->push_back({in.route.layer, in.route.step, in.token_id, in.hidden.size(),
                     std::vector<int>(in.route.experts.begin(), in.route.experts.end())});
    out.push_back({in.route.layer + 1, in.token_id % 4, 0.1f * (float)(in.route.layer + 1)});
  }
};

struct CountingObserver : ForwardObserver {
  int begins = 0, routes = 0, ends = 0;
  void on_step_begin(int64_t, int) override { ++begins; }
  void on_route(const RouteRecord&) override { ++routes; }
  void on_step_end() override { ++ends; }
};

// One layer's routing of an n-token step: token t chose experts {t % 6, (t + 1) % 6}.
struct Step {
  int n, top_k = 2;
  int64_t n_embd = 4;
  std::vector<float> hidden;
  std::vector<int> experts;
  std::vector<float> weights;
  std::vector<int32_t> tokens;
  Step(int n_tokens, int32_t first_token) : n(n_tokens) {
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < n_embd; ++i)
        hidden.push_back(std::sin(0.7f * (float)(t * n_embd + i + first_token)));
      experts.push_back(t % 6), experts.push_back((t + 1) % 6);
      weights.push_back(0.7f), weights.push_back(0.3f);
      tokens.push_back(first_token + t);
    }
  }
  RouteRecord at(int layer) const {
    RouteRecord r;
    r.layer = layer, r.n_tokens = n, r.top_k = top_k, r.n_embd = n_embd, r.prefill = n > 1;
    r.hidden = hidden, r.experts = experts, r.weights = weights, r.tokens = tokens;
    return r;
  }
};

TEST(PredictorPrefetch, FeedsEveryTokenQueuesTheLastTokensPredictionsAndChains) {
  std::vector<ProbePredictor::Seen> seen;
  int sequences = 0;
  RecordingProvider prov;
  CountingObserver next;
  PredictorPrefetch pp(prov, std::make_unique<ProbePredictor>(&seen, &sequences), /*n_layers=*/3,
                       /*max_tokens=*/2);
  pp.set_next(&next);

  // A 5-token prefill at position 0 (new sequence), layers 0..2.
  const Step prefill(5, 10);
  pp.on_step_begin(0, 5);
  for (int l = 0; l < 3; ++l) pp.on_route(prefill.at(l));
  pp.on_step_end();
  EXPECT_EQ(sequences, 1);
  ASSERT_EQ(seen.size(), 15u);  // every token of every layer trains the predictor
  for (size_t i = 0; i < seen.size(); ++i) {
    const int t = (int)(i % 5);
    EXPECT_EQ(seen[i].layer, (int)(i / 5));
    EXPECT_EQ(seen[i].step, (uint64_t)t);
    EXPECT_EQ(seen[i].token, 10 + t);
    EXPECT_EQ(seen[i].hidden, 4u);
    EXPECT_EQ(seen[i].experts, (std::vector<int>{t % 6, (t + 1) % 6}));
  }
  // Only tokens 3 and 4 (ids 13, 14 -> experts 1, 2) are queued; layer 2's predictions target
  // layer 3, outside the model, and are dropped. One on_route call queues its own predictions.
  std::vector<std::tuple<int, int, float>> got;
  for (auto& c : prov.calls) got.emplace_back(c.layer, c.expert, c.confidence);
  const std::vector<std::tuple<int, int, float>> want = {
      {1, 1, 0.1f}, {1, 2, 0.1f}, {2, 1, 0.2f}, {2, 2, 0.2f}};
  EXPECT_EQ(got, want);  // per on_route call: layer 0's first, then layer 1's
  EXPECT_EQ(pp.predictions(), 4u);

  // A decode step continues the global step count and does not start a new sequence.
  prov.calls.clear();
  const Step decode(1, 21);
  pp.on_step_begin(5, 1);
  pp.on_route(decode.at(0));
  pp.on_step_end();
  EXPECT_EQ(sequences, 1);
  EXPECT_EQ(seen.back().step, 5u);
  ASSERT_EQ(prov.calls.size(), 1u);
  EXPECT_EQ(prov.calls[0].layer, 1);
  EXPECT_EQ(prov.calls[0].expert, 21 % 4);
  EXPECT_EQ(next.begins, 2);
  EXPECT_EQ(next.routes, 4);
  EXPECT_EQ(next.ends, 2);

  pp.on_step_begin(0, 1);  // the engine was reset
  EXPECT_EQ(sequences, 2);
}

TEST(PredictorPrefetch, QueuesWhatTheTrainedPromoeNetworkPredicts) {
  PromoeModel m;
  m.init(/*layers=*/3, /*experts=*/6, /*hidden=*/4, /*width=*/8, /*stride=*/1, /*top_k=*/2,
         /*seed=*/11);
  for (auto& b : m.b2) b = {0.5f, -0.2f, 0.1f, 0.3f, -0.4f, 0.0f};  // distinct logits
  const std::string path = temp_path("live_promoe.bin");
  m.save(path);
  PredictorOptions po;
  po.n_layers = 3, po.n_experts = 6, po.top_k = 2, po.hidden_dim = 4, po.model_path = path;
  RecordingProvider prov;
  PredictorPrefetch pp(prov, make_predictor("promoe", po), 3);

  const Step decode(1, 7);
  for (int l = 0; l < 3; ++l) {
    prov.calls.clear();
    pp.on_step_begin(l, 1);
    pp.on_route(decode.at(l));
    pp.on_step_end();
    if (l == 2) {
      EXPECT_TRUE(prov.calls.empty());  // layer 3 does not exist
      continue;
    }
    // Independent reference: the network's logits, top-2, sigmoid confidences, best first.
    std::vector<float> lg;
    m.forward(l, decode.hidden.data(), lg);
    std::vector<int> order = {0, 1, 2, 3, 4, 5};
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lg[a] > lg[b]; });
    ASSERT_EQ(prov.calls.size(), 2u) << l;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(prov.calls[i].layer, l + 1);
      EXPECT_EQ(prov.calls[i].expert, order[i]);
      EXPECT_NEAR(prov.calls[i].confidence, 1.0 / (1.0 + std::exp(-(double)lg[order[i]])), 1e-6);
    }
  }
  // Weights trained for another shape are refused, not silently useless.
  po.hidden_dim = 64;
  EXPECT_THROW(make_predictor("promoe", po), Error);
}

class LivePredictorCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = temp_path("live_pred.gguf");
    Cmd c = run_moeflow("gen-model --arch mixtral --preset tiny -q -o '" + model + "'");
    ASSERT_EQ(c.rc, 0) << c.out;
    const std::string prompts = temp_path("live_prompts.txt");
    std::ofstream(prompts)
        << "the cat sat\nhello world again\nsome more text here\na b c d e f\nzebra\n";
    const std::string tr = temp_path("live.mft");
    c = run_moeflow("trace -m '" + model + "' --prompts '" + prompts + "' -o '" + tr +
                    "' -n 24 --hidden -t 2");
    ASSERT_EQ(c.rc, 0) << c.out;
    const std::string weights = temp_path("live_promoe.bin");
    c = run_moeflow("train-predictor -t '" + tr + "' -o '" + weights +
                    "' --split sample --with-prefill --epochs 5");
    ASSERT_EQ(c.rc, 0) << c.out;
    model_ = model, weights_ = weights;  // set only once everything exists
  }
  void SetUp() override { ASSERT_FALSE(weights_.empty()) << "suite set-up failed"; }
  // Generated text (stdout) and the offload statistics (the last line, JSON on stderr).
  static std::pair<std::string, nlohmann::json> run(const std::string& extra) {
    const std::string base = "run -m '" + model_ + "' -p 'the cat sat on' -n 24 -t 2 " + extra;
    const Cmd text = run_moeflow(base + " --stats none", false);
    EXPECT_EQ(text.rc, 0) << extra;
    const Cmd stats = run_moeflow(base + " --stats json");
    EXPECT_EQ(stats.rc, 0) << extra << ": " << stats.out;
    std::string line, last;
    std::istringstream in(stats.out);
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
    return {text.out, j.is_discarded() ? nlohmann::json{} : j};
  }
  static inline std::string model_, weights_;
};

TEST_F(LivePredictorCli, EveryPredictorPrefetchesAndKeepsTheOutputExact) {
  const std::string reference = run("").first;
  ASSERT_GT(reference.size(), 1u);
  std::map<std::string, std::string> runs = {
      {"promoe", "--prefetch promoe --predictor-model '" + weights_ + "'"},
      {"token", "--prefetch token"},
      {"gate", "--prefetch gate"},
      {"stacked", "--prefetch stacked"},
      {"duoserve", "--prefetch duoserve"},
      {"eamc", "--prefetch eamc"},
      {"lookahead", "--prefetch lookahead"}};
  for (const auto& [name, flags] : runs) {
    // --prefetch-always: on a model this small the arrival estimate may hold back every
    // prefetch, and this test is about the predictors' prefetches.
    const auto [text, j] = run("--cache-rate 0.4 --prefetch-always " + flags);
    EXPECT_EQ(text, reference) << name;
    ASSERT_TRUE(j.contains("offload")) << name;
    EXPECT_EQ(j["offload"]["prefetch"], name) << name;
    EXPECT_GT(j["offload"]["predictions"].get<uint64_t>(), 0u) << name;
    EXPECT_GT(j["offload"]["total"]["prefetch_issued"].get<uint64_t>(), 0u)
        << name << ": " << j["offload"].dump();
  }
}

// --lookahead reaches the gate predictor: at distance 2 it predicts the next two layers from each
// layer's input (the second with half the confidence), so it makes more predictions than at
// distance 1 over the same tokens, and the output stays exact. (The option used to be read by
// the lookahead prefetcher only; gate ran at distance 1 whatever was asked.)
TEST_F(LivePredictorCli, LookaheadSetsTheGatePredictorsDistance) {
  const std::string reference = run("").first;
  const auto [near_text, near] =
      run("--cache-rate 0.4 --prefetch-always --prefetch gate --lookahead 1");
  const auto [far_text, far] =
      run("--cache-rate 0.4 --prefetch-always --prefetch gate --lookahead 2");
  EXPECT_EQ(near_text, reference);
  EXPECT_EQ(far_text, reference);
  ASSERT_TRUE(near.contains("offload") && far.contains("offload"));
  EXPECT_GT(far["offload"]["predictions"].get<uint64_t>(),
            near["offload"]["predictions"].get<uint64_t>())
      << "near: " << near["offload"].dump() << "\nfar: " << far["offload"].dump();
}

TEST_F(LivePredictorCli, BadPredictorOptionsAreClearErrors) {
  const std::string other = temp_path("other_shape.bin");
  PromoeModel m;
  m.init(2, 8, 16, 4, 1, 2, 1);
  m.save(other);
  struct Case {
    std::string args, expect;
  };
  for (const Case& k :
       {Case{"--prefetch psychic", "psychic not in {none,lookahead,gate"},
        Case{"--prefetch promoe", "needs trained weights"},
        Case{"--prefetch promoe --predictor-model /nonexistent.bin", "cannot open"},
        Case{"--prefetch promoe --predictor-model '" + other + "'", "was trained for"},
        Case{"--prefetch lookahead --predictor-model '" + weights_ + "'",
             "--prefetch promoe only"}}) {
    const Cmd c = run_moeflow("run -m '" + model_ + "' -p 'x' -n 2 --cache-rate 0.5 " + k.args);
    EXPECT_NE(c.rc, 0) << k.args;
    EXPECT_NE(c.out.find(k.expect), std::string::npos) << k.args << ": " << c.out;
  }
}

}  // namespace
}  // namespace moeflow::test
