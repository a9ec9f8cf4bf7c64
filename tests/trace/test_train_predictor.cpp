// `moeflow train-predictor` end to end: on a trace whose layer-(l+1) experts are a fixed
// function of the hidden state entering layer l it must learn the function (high held-out
// recall); on random targets it must not beat chance (no leak from the training split).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "../model/run_binary.h"
#include "../model/test_helpers.h"
#include "trace/trace.h"

namespace moeflow::test {
namespace {

// 3 layers, 8 experts, top-2, hidden 16; `learnable`: the experts of layer l+1 are the two
// largest of hidden[0..7] + l (a fixed projection); otherwise uniformly random.
trace::Trace synthetic(bool learnable, bool with_hidden) {
  trace::Trace t;
  t.source = "synthetic";
  t.n_layers = 3, t.n_experts = 8, t.top_k = 2, t.hidden_dim = with_hidden ? 16 : 0;
  std::mt19937 rng(learnable ? 5 : 6);
  std::normal_distribution<float> nd;
  for (int step = 0; step < 1500; ++step) {
    trace::TokenStep s;
    s.pos = step;
    std::vector<float> h(16);
    for (auto& x : h) x = nd(rng);
    for (int l = 0; l < 3; ++l) {
      trace::LayerRoute r;
      r.layer = l;
      std::vector<int> e(8);
      for (int i = 0; i < 8; ++i) e[i] = i;
      if (learnable && l > 0) {
        const int sh = l - 1;
        std::sort(e.begin(), e.end(), [&](int a, int b) { return h[a + sh] > h[b + sh]; });
      } else {
        std::shuffle(e.begin(), e.end(), rng);
      }
      r.experts = {e[0], e[1]};
      r.weights = {0.6f, 0.4f};
      if (with_hidden) r.hidden = h;
      s.routes.push_back(r);
    }
    t.steps.push_back(s);
  }
  return t;
}

nlohmann::json train(const std::string& trace_path, const std::string& extra = "") {
  const Cmd c = run_moeflow("train-predictor -t '" + trace_path + "' -o '" + temp_path("p.bin") +
                                "' --epochs 15 " + extra, false);
  EXPECT_EQ(c.rc, 0) << c.out;
  return nlohmann::json::parse(c.out);
}

TEST(TrainPredictor, LearnsAFunctionOfTheHiddenStateAndNothingFromNoise) {
  const std::string good = temp_path("learnable.mft"), noise = temp_path("noise.mft");
  trace::write_trace(synthetic(true, true), good);
  trace::write_trace(synthetic(false, true), noise);
  const nlohmann::json g = train(good), n = train(noise);
  EXPECT_EQ(g["train_samples"].get<int>() + g["test_samples"].get<int>(), 1500 * 2);
  EXPECT_EQ(g["test_samples"].get<int>(), 300);  // every 10th of 3000 samples
  EXPECT_GT(g["test_recall"].get<double>(), 0.8) << g.dump();
  EXPECT_GT(g["test_recall"].get<double>(), g["test_recall_untrained"].get<double>() + 0.3);
  EXPECT_NEAR(n["test_recall"].get<double>(), 0.25, 0.08) << n.dump();  // chance: 2 of 8
  // The saved weights load into the simulator's ProMoE predictor.
  const Cmd sim = run_moeflow("sim --trace '" + good + "' --policy lru --predictor promoe --predictor-model '" +
                              temp_path("p.bin") + "' --cache-rate 0.5 --hw pcie4x16 --json", false);
  ASSERT_EQ(sim.rc, 0) << sim.out;
  const nlohmann::json r = nlohmann::json::parse(sim.out);
  ASSERT_FALSE(r["results"].empty());
}

TEST(TrainPredictor, BadInputsAreClearErrors) {
  const std::string nohidden = temp_path("nohidden.mft");
  trace::write_trace(synthetic(true, false), nohidden);
  const std::string good = temp_path("learnable2.mft");
  trace::write_trace(synthetic(true, true), good);
  struct Case { std::string args, expect; };
  for (const Case& k : {Case{"-t '" + nohidden + "'", "no hidden states"},
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
