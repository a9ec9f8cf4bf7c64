// Sampling distributions against float64 reference probabilities with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

namespace moeflow {
namespace {

// Reference: softmax(logits / temp), keep top_k, then top_p prefix, then min_p, renormalise.
std::vector<double> reference_probs(const std::vector<float>& logits, float temp, int top_k,
                                    float top_p, float min_p) {
  const int V = (int)logits.size();
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (top_k > 0 && top_k < V) idx.resize(top_k);
  double mx = logits[idx[0]] / (double)temp, sum = 0;
  std::vector<double> p(V, 0.0);
  for (int i : idx) sum += (p[i] = std::exp(logits[i] / (double)temp - mx));
  for (int i : idx) p[i] /= sum;
  double cum = 0;
  size_t keep = idx.size();
  for (size_t r = 0; r < idx.size(); ++r) {
    cum += p[idx[r]];
    if (top_p < 1 && cum >= top_p) {
      keep = r + 1;
      break;
    }
  }
  size_t k2 = 1;
  while (k2 < keep && (min_p <= 0 || p[idx[k2]] >= min_p * p[idx[0]])) ++k2;
  std::vector<double> out(V, 0.0);
  double s = 0;
  for (size_t r = 0; r < k2; ++r) s += p[idx[r]];
  for (size_t r = 0; r < k2; ++r) out[idx[r]] = p[idx[r]] / s;
  return out;
}

// Draws n samples and checks every token's frequency against its reference probability
// within 5 standard deviations (binomial), and that filtered tokens never appear.
void check_distribution(const std::vector<float>& logits, SamplerParams sp, int n) {
  const auto ref = reference_probs(logits, sp.temperature, sp.top_k, sp.top_p, sp.min_p);
  Sampler s(sp);
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < n; ++i) count[s.sample(logits, {})]++;
  for (size_t t = 0; t < logits.size(); ++t) {
    const double p = ref[t];
    if (p == 0) {
      EXPECT_EQ(count[t], 0) << "token " << t << " should have been filtered";
      continue;
    }
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(count[t], n * p, 5 * sd + 1) << "token " << t;
  }
}

std::vector<float> test_logits() {
  return {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, 0.0f, -1.0f, 3.0f, 0.9f, 1.1f, -3.0f, 0.5f};
}

TEST(Sampler, PlainTemperatureMatchesSoftmax) {
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 1;
  check_distribution(test_logits(), sp, 20000);
  sp.temperature = 0.5f;
  sp.seed = 2;
  check_distribution(test_logits(), sp, 20000);
}

TEST(Sampler, TopKTopPMinP) {
  SamplerParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 5;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 3;
  check_distribution(test_logits(), sp, 20000);
  sp.top_k = 0;
  sp.top_p = 0.7f;
  sp.seed = 4;
  check_distribution(test_logits(), sp, 20000);
  sp.top_p = 1.0f;
  sp.min_p = 0.2f;
  sp.seed = 5;
  check_distribution(test_logits(), sp, 20000);
  sp.top_k = 6;
  sp.top_p = 0.9f;
  sp.min_p = 0.05f;
  sp.seed = 6;
  check_distribution(test_logits(), sp, 20000);
}

TEST(Sampler, GreedyIsArgmax) {
  SamplerParams sp;
  sp.temperature = 0.0f;
  Sampler s(sp);
  auto l = test_logits();
  EXPECT_EQ(s.sample(l, {}), 7);
  l[3] = 10;
  EXPECT_EQ(s.sample(l, {}), 3);
}

TEST(Sampler, SameSeedSameSequence) {
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0;
  sp.seed = 99;
  Sampler a(sp), b(sp);
  sp.seed = 100;
  Sampler c(sp);
  const auto l = test_logits();
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int x = a.sample(l, {}), y = b.sample(l, {}), z = c.sample(l, {});
    EXPECT_EQ(x, y);
    differ += x != z;
  }
  EXPECT_GT(differ, 0);
}

TEST(Sampler, RepetitionPenaltyWindow) {
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0;
  sp.repeat_penalty = 2.0f;
  sp.repeat_last_n = 3;
  Sampler s(sp);
  const std::vector<float> l = {2.0f, -1.0f, 1.0f, 0.5f};
  // Token 3 is outside the 3-token window; 0 (twice) and 1 are in it, each penalised once.
  const std::vector<int32_t> hist = {3, 0, 1, 0};
  s.prepare(l, hist);
  std::vector<float> pen = {1.0f, -2.0f, 1.0f, 0.5f};
  std::vector<double> ref(4);
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += (ref[i] = std::exp((double)pen[i]));
  std::map<int, double> got;
  for (auto [t, p] : s.candidates()) got[t] = p;
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], ref[i] / sum, 1e-6) << i;
}

// Softmax at temperature 1 of hand-computed penalised logits, against the sampler's candidates.
void expect_probs_of(const Sampler& s, const std::vector<double>& logits) {
  double sum = 0;
  for (double l : logits) sum += std::exp(l);
  std::map<int, double> got;
  for (auto [t, p] : s.candidates()) got[t] = p;
  ASSERT_EQ(got.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(got[(int)i], std::exp(logits[i]) / sum, 1e-6) << i;
}

SamplerParams plain(float rp, float freq, float presence, int last_n) {
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0;
  sp.repeat_penalty = rp;
  sp.frequency_penalty = freq;
  sp.presence_penalty = presence;
  sp.repeat_last_n = last_n;
  return sp;
}

TEST(Sampler, FrequencyAndPresencePenaltiesMatchHandComputedLogits) {
  const std::vector<float> l = {2.0f, -1.0f, 1.0f, 0.5f, 0.25f};
  // Window of 5: {0, 1, 0, 0, 2}; token 3 fell out of it. Counts: 0 x3, 1 x1, 2 x1.
  const std::vector<int32_t> hist = {3, 0, 1, 0, 0, 2};
  Sampler a(plain(1.0f, 0.5f, 0.25f, 5));
  a.prepare(l, hist);
  // logit - count * 0.5 - 0.25 for tokens in the window.
  expect_probs_of(a, {2.0 - 1.75, -1.0 - 0.75, 1.0 - 0.75, 0.5, 0.25});
  // With the repetition penalty too: divided (positive) or multiplied (negative) first.
  Sampler b(plain(2.0f, 0.5f, 0.25f, 5));
  b.prepare(l, hist);
  expect_probs_of(b, {1.0 - 1.75, -2.0 - 0.75, 0.5 - 0.75, 0.5, 0.25});
  // Negative values reward repeats; the window of all (-1) sees token 3 as well.
  Sampler c(plain(1.0f, -0.5f, 0.0f, -1));
  c.prepare(l, hist);
  expect_probs_of(c, {2.0 + 1.5, -1.0 + 0.5, 1.0 + 0.5, 0.5 + 0.5, 0.25});
  // Off by default: the logits are untouched.
  Sampler d(plain(1.0f, 0.0f, 0.0f, 5));
  d.prepare(l, hist);
  expect_probs_of(d, {2.0, -1.0, 1.0, 0.5, 0.25});
}

TEST(Sampler, LogitBiasIsAddedBeforeEverythingElse) {
  const std::vector<float> l = {2.0f, -1.0f, 1.0f, 0.5f, 0.25f};
  SamplerParams sp = plain(2.0f, 0.0f, 0.0f, 4);
  sp.logit_bias = {{4, 3.0f}, {1, -0.5f}, {99, 5.0f}};  // 99: outside the vocabulary, skipped
  Sampler s(sp);
  s.prepare(l, std::vector<int32_t>{4});
  // Token 4: (0.25 + 3) / 2 (biased, then penalised as a repeat); token 1: -1 - 0.5.
  expect_probs_of(s, {2.0, -1.5, 1.0, 0.5, 3.25 / 2});
  SamplerParams g;
  g.temperature = 0;
  g.logit_bias = {{0, -100.0f}};  // bans the argmax: the runner-up wins
  Sampler greedy(g);
  EXPECT_EQ(greedy.sample(l, {}), 2);
  g.logit_bias = {{4, 1.8f}};
  Sampler greedy2(g);
  EXPECT_EQ(greedy2.sample(l, {}), 4);  // 0.25 + 1.8 > 2
}

TEST(Sampler, ParameterRangesNameTheFieldAndTheFlag) {
  auto problem = [](auto set) {
    SamplerParams p;
    set(p);
    return check_sampler_params(p);
  };
  EXPECT_FALSE(check_sampler_params(SamplerParams{}));
  struct Case {
    std::function<void(SamplerParams&)> set;
    const char* field;
    const char* flag;
  };
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  const Case bad[] = {
      {[](SamplerParams& p) { p.temperature = -1; }, "temperature", "--temp"},
      {[&](SamplerParams& p) { p.temperature = inf; }, "temperature", "--temp"},
      {[&](SamplerParams& p) { p.temperature = nan; }, "temperature", "--temp"},
      {[](SamplerParams& p) { p.temperature = 100.5f; }, "temperature", "--temp"},
      {[](SamplerParams& p) { p.top_k = -2; }, "top_k", "--top-k"},
      {[](SamplerParams& p) { p.top_p = 1.5f; }, "top_p", "--top-p"},
      {[](SamplerParams& p) { p.top_p = -0.1f; }, "top_p", "--top-p"},
      {[](SamplerParams& p) { p.min_p = 2; }, "min_p", "--min-p"},
      {[](SamplerParams& p) { p.repeat_penalty = 0; }, "repeat_penalty", "--repeat-penalty"},
      {[](SamplerParams& p) { p.repeat_penalty = -1; }, "repeat_penalty", "--repeat-penalty"},
      {[&](SamplerParams& p) { p.repeat_penalty = nan; }, "repeat_penalty", "--repeat-penalty"},
      {[](SamplerParams& p) { p.repeat_last_n = -2; }, "repeat_last_n", "--repeat-last-n"},
      {[](SamplerParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty",
       "--presence-penalty"},
      {[](SamplerParams& p) { p.frequency_penalty = -3; }, "frequency_penalty",
       "--frequency-penalty"},
      {[](SamplerParams& p) {
         p.logit_bias = {{3, 101.0f}};
       },
       "logit_bias", "--logit-bias"},
      {[](SamplerParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "logit_bias", "--logit-bias"},
  };
  for (const Case& c : bad) {
    const auto e = problem(c.set);
    ASSERT_TRUE(e) << c.field;
    EXPECT_STREQ(e->field, c.field);
    EXPECT_STREQ(e->flag, c.flag);
    EXPECT_FALSE(e->requirement.empty());
    EXPECT_FALSE(e->value.empty());
    SamplerParams p;
    c.set(p);
    try {
      Sampler s(p);
      ADD_FAILURE() << c.field << " accepted";
    } catch (const Error& ex) {
      EXPECT_EQ(std::string(ex.what()).rfind(c.flag, 0), 0u) << ex.what();
    }
  }
  // The edges of every range are valid.
  EXPECT_FALSE(problem([](SamplerParams& p) {
    p.temperature = 100;
    p.top_k = -1;
    p.top_p = 0;
    p.min_p = 1;
    p.repeat_penalty = 100;
    p.repeat_last_n = -1;
    p.presence_penalty = -2;
    p.frequency_penalty = 2;
    p.logit_bias = {{0, -100.0f}, {5, 100.0f}};
  }));
  const auto e = problem([](SamplerParams& p) { p.repeat_penalty = 0; });
  EXPECT_EQ(e->requirement + ", got " + e->value, "must be > 0 and <= 100 (1 = off), got 0");
}

// A constraint that allows the even tokens only, counting how it is used.
class EvenTokens : public TokenConstraint {
 public:
  int checks = 0, masks = 0, accepted = 0;
  bool allows(int32_t id) override {
    ++checks;
    return id % 2 == 0;
  }
  size_t mask(std::span<float> logits) override {
    ++masks;
    for (size_t i = 1; i < logits.size(); i += 2)
      logits[i] = -std::numeric_limits<float>::infinity();
    return (logits.size() + 1) / 2;
  }
  void accept(int32_t id) override {
    EXPECT_EQ(id % 2, 0);
    ++accepted;
  }
};

TEST(SamplerConstraint, DrawsOnlyAllowedTokensAndMasksOnlyOnRefusal) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, 0.5f, 1.0f, 0.0f};
  SamplerParams p;
  p.temperature = 0;
  Sampler greedy(p);
  EvenTokens c;
  greedy.set_constraint(&c);
  EXPECT_EQ(greedy.sample(logits, {}), 2);  // argmax 1 is refused: the masked argmax
  EXPECT_EQ(c.masks, 1);
  const std::vector<float> even_best = {0.1f, 0.0f, 3.0f, 0.5f};
  EXPECT_EQ(greedy.sample(even_best, {}), 2);
  EXPECT_EQ(c.masks, 1);  // the drawn token was allowed: no mask
  EXPECT_EQ(c.accepted, 2);
}

// Without filters the check-first draw is exactly the masked distribution p(t) / P(allowed).
TEST(SamplerConstraint, CheckFirstDrawIsTheMaskedDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, 2.0f, -1.0f, 1.5f};
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 11;
  Sampler s(p);
  EvenTokens c;
  s.set_constraint(&c);
  const int n = 200000;
  std::map<int32_t, int> hits;
  for (int i = 0; i < n; ++i) ++hits[s.sample(logits, {})];
  double z = 0;
  for (int t : {0, 2, 4}) z += std::exp((double)logits[t]);
  for (int t : {0, 2, 4})
    EXPECT_NEAR((double)hits[t] / n, std::exp((double)logits[t]) / z, 0.005) << t;
  EXPECT_EQ(hits.size(), 3u);
  EXPECT_LT(c.masks, n);  // allowed draws needed no mask
}

TEST(SamplerConstraint, NothingAllowedIsAnError) {
  class Nothing : public TokenConstraint {
    bool allows(int32_t) override { return false; }
    size_t mask(std::span<float> l) override {
      for (float& x : l) x = -std::numeric_limits<float>::infinity();
      return 0;
    }
    void accept(int32_t) override {}
  } c;
  Sampler s;
  s.set_constraint(&c);
  EXPECT_THROW(s.sample(std::vector<float>{1, 2, 3}, {}), Error);
}

}  // namespace
}  // namespace moeflow
