// `moeflow train-predictor` end to end: on a trace whose layer-(l+1) experts are a fixed
// function of the hidden state entering layer l (top-2 of a fixed linear map) it must learn the
// function (high held-out recall); on random targets it must not beat chance (nothing leaks
// from the training split into the held-out one).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "trace/trace.h"

namespace moeflow::test {
namespace {

constexpr int kRequests = 60, kSteps = 25, kLayers = 3, kExperts = 8, kHidden = 16;

// kRequests requests of kSteps decode tokens, 3 layers, top-2 of 8 experts, hidden 16. Every
// layer's hidden state is drawn independently; `learnable`: the experts of layer l > 0 are the
// two largest entries of W_l h_{l-1} for a fixed random W_l (8 x 16), otherwise random.
trace::Trace synthetic(bool learnable, bool with_hidden,
                       trace::Phase phase = trace::Phase::decode) {
  trace::Trace t;
  t.source = "synthetic";
  t.n_layers = kLayers, t.n_experts = kExperts, t.top_k = 2,
  t.hidden_dim = with_hidden ? kHidden : 0;
  std::mt19937 rng(learnable ? 5 : 6);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> W(kLayers, std::vector<float>(kExperts * kHidden));
  for (auto& w : W)
    for (auto& x : w) x = nd(rng);
  for (int req = 0; req < kRequests; ++req)
    for (int step = 0; step < kSteps; ++step) {
      trace::TokenStep s;
      s.request = req;
      s.phase = phase;
      s.pos = step;
      std::vector<float> prev;
      for (int l = 0; l < kLayers; ++l) {
        std::vector<float> h(kHidden);
        for (auto& x : h) x = nd(rng);
        std::vector<int> e(kExperts);
        for (int i = 0; i < kExperts; ++i) e[i] = i;
        if (learnable && l > 0) {
          std::vector<float> y(kExperts, 0.f);
          for (int i = 0; i < kExperts; ++i)
            for (int j = 0; j < kHidden; ++j) y[i] += W[l][i * kHidden + j] * prev[j];
          std::sort(e.begin(), e.end(), [&](int a, int b) { return y[a] > y[b]; });
        } else {
          std::shuffle(e.begin(), e.end(), rng);
        }
        trace::LayerRoute r;
        r.layer = l;
        r.experts = {e[0], e[1]};
        r.weights = {0.6f, 0.4f};
        if (with_hidden) r.hidden = h;
        s.routes.push_back(r);
        prev = h;
      }
      t.steps.push_back(s);
    }
  return t;
}

// Trains on `trace_path` into `trace_path`.bin; returns train-predictor's JSON report.
nlohmann::json train(const std::string& trace_path, const std::string& extra = "") {
  const Cmd c = run_moeflow("train-predictor -t '" + trace_path + "' -o '" + trace_path + ".bin" +
                                "' --epochs 20 " + extra,
                            false);
  EXPECT_EQ(c.rc, 0) << c.out;
  return nlohmann::json::parse(c.out);
}

TEST(TrainPredictor, LearnsAFunctionOfTheHiddenStateAndNothingFromNoise) {
  const std::string good = temp_path("learnable.mft"), noise = temp_path("noise.mft");
  trace::write_trace(synthetic(true, true), good);
  trace::write_trace(synthetic(false, true), noise);
  const nlohmann::json g = train(good), n = train(noise);
  const int samples = kRequests * kSteps * (kLayers - 1);
  EXPECT_EQ(g["train_samples"].get<int>() + g["test_samples"].get<int>(), samples);
  // Request split (the default): requests 9, 19, ..., 59 are held out.
  EXPECT_EQ(g["test_samples"].get<int>(), kRequests / 10 * kSteps * (kLayers - 1));
  EXPECT_GT(g["test_recall"].get<double>(), 0.9) << g.dump();
  EXPECT_GT(g["test_recall"].get<double>(), g["test_recall_untrained"].get<double>() + 0.3);
  EXPECT_NEAR(n["test_recall"].get<double>(), 0.25, 0.06) << n.dump();  // chance: 2 of 8
  EXPECT_GT(n["train_recall"].get<double>(),
            n["test_recall"].get<double>());  // it did fit the noise

  // The saved weights load into the simulator's ProMoE predictor, which predicts layers 1 and 2
  // of every token about as well as train-predictor measured (layer 0 is nobody's stride-1
  // target, so at most 2/3 of all uses can be predicted).
  const Cmd sim =
      run_moeflow("sim --trace '" + good + "' --policy lru --predictor promoe --predictor-model '" +
                      good + ".bin' --cache-rate 0.5 --hw pcie4x16 --json",
                  false);
  ASSERT_EQ(sim.rc, 0) << sim.out;
  const nlohmann::json r = nlohmann::json::parse(sim.out);
  ASSERT_FALSE(r["results"].empty());
  EXPECT_GT(r["results"][0]["prediction_recall"].get<double>(), 2.0 / 3.0 * 0.9) << sim.out;
  EXPECT_LE(r["results"][0]["prediction_recall"].get<double>(), 2.0 / 3.0 + 1e-9) << sim.out;
}

TEST(TrainPredictor, SampleSplitHoldsOutEveryTenthSample) {
  const std::string good = temp_path("learnable_s.mft");
  trace::write_trace(synthetic(true, true), good);
  const nlohmann::json g = train(good, "--split sample --hidden 32");
  EXPECT_EQ(g["test_samples"].get<int>(), kRequests * kSteps * (kLayers - 1) / 10);
  EXPECT_EQ(g["width"].get<int>(), 32);
  EXPECT_GT(g["test_recall"].get<double>(), 0.9) << g.dump();
}

TEST(TrainPredictor, BadInputsAreClearErrors) {
  const std::string nohidden = temp_path("nohidden.mft");
  trace::write_trace(synthetic(true, false), nohidden);
  const std::string good = temp_path("learnable2.mft");
  trace::write_trace(synthetic(true, true), good);
  const std::string prefill = temp_path("prefill_only.mft");
  trace::write_trace(synthetic(true, true, trace::Phase::prefill), prefill);
  trace::Trace e = synthetic(true, true);
  e.steps.clear();
  const std::string empty = temp_path("empty.mft");
  trace::write_trace(e, empty);
  trace::Trace one = synthetic(true, true);
  for (auto& s : one.steps) s.request = 0;
  const std::string one_request = temp_path("one_request.mft");
  trace::write_trace(one, one_request);
  struct Case {
    std::string args, expect;
  };
  for (const Case& k :
       {Case{"-t '" + nohidden + "'", "no hidden states"}, Case{"-t '" + empty + "'", "empty"},
        Case{"-t '" + prefill + "'", "--with-prefill"},
        Case{"-t '" + one_request + "'", "--split sample"},
        Case{"-t '" + good + "' --split token", "--split"},
        Case{"-t '" + good + "' --stride 3", "--stride"},
        Case{"-t '" + good + "' --epochs 0", "--epochs"},
        Case{"-t /nonexistent.mft", "nonexistent"}}) {
    const Cmd c = run_moeflow("train-predictor -o '" + temp_path("x.bin") + "' " + k.args);
    EXPECT_NE(c.rc, 0) << k.args;
    EXPECT_NE(c.out.find(k.expect), std::string::npos) << k.args << ": " << c.out;
  }
}

}  // namespace
}  // namespace moeflow::test
