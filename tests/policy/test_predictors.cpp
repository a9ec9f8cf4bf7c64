// Each predictor on small hand-made routing where the right prediction is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "policy/predictor.h"
#include "policy/promoe_mlp.h"

namespace moeflow {
namespace {

PredictorOptions popts(int layers, int experts, int top_k) {
  PredictorOptions o;
  o.n_layers = layers;
  o.n_experts = experts;
  o.top_k = top_k;
  return o;
}

std::vector<int> experts_for(const std::vector<Prediction>& p, int layer) {
  std::vector<int> v;
  for (auto& x : p)
    if (x.layer == layer) v.push_back(x.expert);
  std::sort(v.begin(), v.end());
  return v;
}

TEST(PredictorFactory, KnowsEveryPredictor) {
  auto names = predictor_names();
  for (const char* n : {"gate", "stacked", "token", "promoe", "duoserve", "eamc"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_THROW(make_predictor("psychic", popts(2, 4, 1)), Error);
  EXPECT_THROW(make_predictor("promoe", popts(2, 4, 1)), Error);  // needs trained weights
}

// Router of layer l: logits = W_l h with W_l picking hidden coordinates; h one-hot -> expert.
void fixed_router(int layer, std::span<const float> h, std::vector<float>& logits) {
  logits.assign(4, 0.f);
  for (int e = 0; e < 4; ++e) logits[e] = h[(e + layer) % 4] * 5.f;
}

TEST(Gate, AppliesTheNextLayersRouterToTheHiddenState) {
  auto p = make_predictor("gate", popts(4, 4, 2));
  std::vector<Prediction> out;
  const int ex[] = {0, 1};
  const float h[] = {0.f, 1.f, 0.5f, 0.f};
  p->on_layer({RouteEvent{0, 0, false, ex, {}}, h, -1}, out);
  EXPECT_TRUE(out.empty());  // no router: nothing to look ahead with
  p->set_router(fixed_router);
  p->on_layer({RouteEvent{0, 0, false, ex, {}}, h, -1}, out);
  // Layer 1: logit_e = 5*h[(e+1)%4] -> e=0 (h1=1), e=1 (h2=.5) are the top 2.
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(experts_for(out, 1), (std::vector<int>{0, 1}));
  EXPECT_GT(out[0].confidence, out[1].confidence);
  out.clear();
  p->on_layer({RouteEvent{3, 0, false, ex, {}}, h, -1}, out);  // last layer: nothing after it
  EXPECT_TRUE(out.empty());
}

// The engine's default predictor. Layers 0, 2, 3 are MoE, layer 1 dense; two layers ahead.
// Reference: the softmax of fixed_router's logits in double, divided by the distance.
TEST(Lookahead, CountsMoeLayersWrapsToTheNextTokenAndAsksForTheModesPrecision) {
  PredictorOptions o = popts(4, 4, 2);
  o.layer_experts = {4, 0, 4, 4};
  o.lookahead = 2;
  const float h[] = {0.f, 1.f, 0.5f, 0.f};
  const int ex[] = {0, 1};
  auto expected = [&](int layer, double discount) {
    std::vector<double> p(4);
    double z = 0;
    for (int e = 0; e < 4; ++e) z += p[e] = std::exp(5.0 * h[(e + layer) % 4]);
    std::vector<std::pair<int, double>> top;
    for (int e = 0; e < 4; ++e) top.push_back({e, p[e] / z * discount});
    std::stable_sort(top.begin(), top.end(), [](auto& a, auto& b) { return a.second > b.second; });
    top.resize(2);
    return top;
  };
  auto check = [&](const std::vector<Prediction>& out, size_t at, int layer, double discount) {
    const auto want = expected(layer, discount);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_LT(at + i, out.size());
      EXPECT_EQ(out[at + i].layer, layer);
      EXPECT_EQ(out[at + i].expert, want[i].first);
      EXPECT_NEAR(out[at + i].confidence, want[i].second, 1e-6);
      EXPECT_EQ(out[at + i].precision, Precision::High);
    }
  };
  auto p = make_predictor("lookahead", o);
  EXPECT_FALSE(p->learns_from_every_token());
  p->set_router(fixed_router);
  std::vector<Prediction> out;
  p->on_layer({RouteEvent{0, 0, false, ex, {}}, h, -1}, out);  // dense layer 1 skipped: 2, then 3
  ASSERT_EQ(out.size(), 4u);
  check(out, 0, 2, 1.0);
  check(out, 2, 3, 0.5);
  out.clear();
  p->on_layer({RouteEvent{3, 0, false, ex, {}}, h, -1}, out);  // past the last: next token's 0, 2
  ASSERT_EQ(out.size(), 4u);
  check(out, 0, 0, 1.0);
  check(out, 2, 2, 0.5);
  out.clear();
  p->on_layer({RouteEvent{2, 0, false, ex, {}}, {}, -1}, out);  // no hidden state: nothing
  EXPECT_TRUE(out.empty());

  // HOBBIT: the top expert (nothing ranked above it) in high precision, the second in low
  // (the weight above it, ~0.92 here, is over T1 = 0.1 and under T2 = 1).
  o.mode.mode = ExpertMode::Hobbit;
  o.mode.t1 = 0.1;
  o.mode.t2 = 1.0;
  o.lookahead = 1;
  auto hob = make_predictor("lookahead", o);
  hob->set_router(fixed_router);
  hob->on_layer({RouteEvent{0, 0, false, ex, {}}, h, -1}, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].precision, Precision::High);
  EXPECT_EQ(out[1].precision, Precision::Low);
  // Skip mode drops the second (its normalised weight is below the threshold) instead.
  out.clear();
  o.mode = {};
  o.mode.mode = ExpertMode::Skip;
  o.mode.skip_threshold = 0.45;
  auto skip = make_predictor("lookahead", o);
  skip->set_router(fixed_router);
  skip->on_layer({RouteEvent{0, 0, false, ex, {}}, h, -1}, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].expert, expected(2, 1.0)[0].first);
}

TEST(Stacked, DropsDepthsWhoseAccuracyFalls) {
  // The hidden state carries its source layer; the router is right one layer ahead, wrong deeper.
  const int L = 8, E = 4;
  auto p = make_predictor("stacked", popts(L, E, 1));
  p->set_router([](int layer, std::span<const float> h, std::vector<float>& logits) {
    logits.assign(4, 0.f);
    int src = (int)h[0];
    int e = layer - src == 1 ? layer % 4 : (layer + 1) % 4;
    logits[e] = 3.f;
  });
  std::vector<Prediction> first, last;
  for (int tok = 0; tok < 12; ++tok)
    for (int l = 0; l < L; ++l) {
      std::vector<Prediction> out;
      const int ex[] = {l % E};
      const float h[] = {(float)l};
      p->on_layer({RouteEvent{l, (uint64_t)tok, false, ex, {}}, h, -1}, out);
      if (tok == 0 && l == 0) first = out;
      if (tok == 11 && l == 2) last = out;
    }
  // At first all three depths are used; after many wrong deep guesses, only depth 1 remains.
  EXPECT_EQ(experts_for(first, 1), (std::vector<int>{1}));
  EXPECT_FALSE(experts_for(first, 2).empty());
  EXPECT_FALSE(experts_for(first, 3).empty());
  EXPECT_EQ(experts_for(last, 3), (std::vector<int>{3}));  // depth 1 from layer 2, correct
  EXPECT_TRUE(experts_for(last, 4).empty());
  EXPECT_TRUE(experts_for(last, 5).empty());
}

TEST(Token, RepeatsWhereTheSameTokenIdWentBefore) {
  const int L = 4;
  auto p = make_predictor("token", popts(L, 8, 1));
  auto run_token = [&](uint64_t step, int id, int base) {
    std::vector<Prediction> first;
    for (int l = 0; l < L; ++l) {
      std::vector<Prediction> out;
      const int ex[] = {(base + l) % 8};
      p->on_layer({RouteEvent{l, step, false, ex, {}}, {}, id}, out);
      if (l == 0) first = out;
    }
    return first;
  };
  run_token(0, 42, 0);  // token 42: experts 0,1,2,3
  run_token(1, 7, 4);   // token 7:  experts 4,5,6,7
  run_token(2, 7, 4);
  run_token(3, 7, 4);
  auto pred = run_token(4, 42, 0);  // predictions for layers 1..3 made at layer 0
  EXPECT_EQ(experts_for(pred, 1), (std::vector<int>{1}));
  EXPECT_EQ(experts_for(pred, 2), (std::vector<int>{2}));
  EXPECT_EQ(experts_for(pred, 3), (std::vector<int>{3}));
  // Unknown token id: falls back to the sequence's popularity (token 7's experts, used twice).
  pred = run_token(5, -1, 0);
  EXPECT_EQ(experts_for(pred, 1), (std::vector<int>{5}));
}

TEST(Eamc, MatchesTheMostSimilarPastRequest) {
  const int L = 4, E = 8;
  auto p = make_predictor("eamc", popts(L, E, 1));
  auto request = [&](std::vector<int> route, uint64_t step0) {
    p->on_sequence_start();
    std::vector<std::vector<Prediction>> outs;
    for (int l = 0; l < L; ++l) {
      std::vector<Prediction> out;
      const int ex[] = {route[l]};
      p->on_layer({RouteEvent{l, step0, false, ex, {}}, {}, -1}, out);
      outs.push_back(out);
    }
    return outs;
  };
  request({0, 1, 2, 3}, 0);           // pattern A
  request({4, 5, 6, 7}, 1);           // pattern B
  auto o = request({4, 0, 0, 0}, 2);  // starts like B
  EXPECT_EQ(experts_for(o[0], 1), (std::vector<int>{5}));
  EXPECT_EQ(experts_for(o[0], 2), (std::vector<int>{6}));
  EXPECT_EQ(experts_for(o[0], 3), (std::vector<int>{7}));
  o = request({0, 9 % E, 9 % E, 9 % E}, 3);  // starts like A
  EXPECT_EQ(experts_for(o[0], 3), (std::vector<int>{3}));
  // Proximity: the next layer gets the highest priority.
  float c1 = -1, c3 = -1;
  for (auto& x : o[0]) {
    if (x.layer == 1) c1 = x.confidence;
    if (x.layer == 3) c3 = x.confidence;
  }
  EXPECT_GT(c1, c3);
  EXPECT_GT(c3, 0.f);
}

TEST(DuoServe, LearnsARepeatingRoutingPattern) {
  const int L = 6, E = 8;
  auto p = make_predictor("duoserve", popts(L, E, 2));
  p->on_sequence_start();
  int correct = 0, total = 0;
  for (int tok = 0; tok < 60; ++tok)
    for (int l = 0; l < L; ++l) {
      std::vector<Prediction> out;
      const int ex[] = {(l * 3) % E, (l * 3 + 1) % E};
      p->on_layer({RouteEvent{l, (uint64_t)tok, false, ex, {}}, {}, -1}, out);
      if (tok >= 40 && l + 1 < L) {
        auto got = experts_for(out, l + 1);
        std::vector<int> want = {((l + 1) * 3) % E, ((l + 1) * 3 + 1) % E};
        std::sort(want.begin(), want.end());
        total++;
        correct += got == want;
      }
    }
  EXPECT_GE(correct, total * 9 / 10) << correct << "/" << total;
}

TEST(Promoe, LearnsASeparableMappingReportsHeldOutRecallAndRoundTrips) {
  // Target expert of layer l+1 = argmax of a fixed projection of the hidden state.
  const int H = 8, E = 4, L = 2;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<PromoeSample> samples;
  for (int i = 0; i < 600; ++i) {
    PromoeSample s;
    s.layer = i % L;
    s.hidden.resize(H);
    for (auto& x : s.hidden) x = nd(rng);
    int best = 0;
    for (int e = 1; e < E; ++e)
      if (s.hidden[e + s.layer] > s.hidden[best + s.layer]) best = e;
    s.target = {best};
    samples.push_back(s);
  }
  PromoeModel m;
  m.init(L + 1, E, H, 16, 1, 1, 3);
  double before = promoe_recall(m, samples, true);
  auto rep = train_promoe(m, samples, 30, 0.05f);
  EXPECT_EQ(rep.test_samples, 60u);  // every 10th held out (9:1)
  EXPECT_EQ(rep.train_samples, 540u);
  EXPECT_GT(rep.test_recall, 0.8) << "before training " << before;
  EXPECT_GT(rep.test_recall, before + 0.3);

  auto path = (std::filesystem::temp_directory_path() /
               ("promoe_test_" + std::to_string(::getpid()) + ".bin"))
                  .string();
  m.save(path);
  PromoeModel r = PromoeModel::load(path);
  std::vector<float> a, b;
  m.forward(1, samples[3].hidden.data(), a);
  r.forward(1, samples[3].hidden.data(), b);
  EXPECT_EQ(a, b);
  auto o = popts(L + 1, E, 1);
  o.model_path = path;
  auto p = make_predictor("promoe", o);
  std::vector<Prediction> out;
  const int ex[] = {0};
  p->on_layer({RouteEvent{samples[3].layer, 0, false, ex, {}}, samples[3].hidden, -1}, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].layer, samples[3].layer + 1);  // stride 1
  std::filesystem::remove(path);
  EXPECT_THROW(PromoeModel::load(path), Error);
}

}  // namespace
}  // namespace moeflow
