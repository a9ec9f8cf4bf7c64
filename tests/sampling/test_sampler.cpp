// Sampling distributions against float64 reference probabilities with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(Sampler, BadParamsAreErrors) {
  SamplerParams sp;
  sp.repeat_penalty = 0;
  EXPECT_THROW(Sampler{sp}, Error);
}

}  // namespace
}  // namespace moeflow
