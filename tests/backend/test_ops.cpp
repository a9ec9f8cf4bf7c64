// Element-wise ops against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace moeflow {
namespace {

std::vector<float> rnd(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

TEST(Ops, RmsNorm) {
  for (int64_t n : {1, 7, 8, 33, 4096}) {
    const auto x = rnd(n, 1 + (uint32_t)n, 3.f), w = rnd(n, 2);
    std::vector<float> out(n);
    rms_norm(x.data(), w.data(), out.data(), n, 1e-5f);
    double ss = 0;
    for (float v : x) ss += (double)v * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(out[i], x[i] * scale * w[i], 1e-5 * std::fabs(x[i] * scale * w[i]) + 1e-6) << n;
  }
}

TEST(Ops, SoftmaxSumsToOneAndMatches) {
  for (int64_t n : {1, 8, 60, 1000}) {
    auto x = rnd(n, 3, 10.f);
    std::vector<double> ref(n);
    double mx = -1e300, sum = 0;
    for (float v : x) mx = std::fmax(mx, v);
    for (int64_t i = 0; i < n; ++i) sum += ref[i] = std::exp((double)x[i] - mx);
    softmax_inplace(x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(x[i], ref[i] / sum, 1e-6 * (ref[i] / sum) + 1e-9);
  }
}

TEST(Ops, Swiglu) {
  const int64_t n = 1000;
  const auto g = rnd(n, 4, 4.f), u = rnd(n, 5);
  std::vector<float> out(n);
  swiglu(g.data(), u.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = g[i] / (1.0 + std::exp(-(double)g[i])) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * std::fabs(ref) + 1e-7);
  }
}

TEST(Ops, RopeNormalAndNeox) {
  for (bool neox : {false, true}) {
    for (int64_t pos : {0, 1, 17, 4000}) {
      const int64_t head_dim = 128, n_rot = neox ? 64 : 128;
      auto x = rnd(head_dim, 6 + (uint32_t)pos);
      const auto orig = x;
      rope_inplace(x.data(), head_dim, n_rot, pos, 10000.f, neox);
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double theta = pos * std::pow(10000.0, -2.0 * i / n_rot);
        const int64_t a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        const double ra = orig[a] * std::cos(theta) - orig[b] * std::sin(theta);
        const double rb = orig[a] * std::sin(theta) + orig[b] * std::cos(theta);
        // theta is computed in float like the references, so large positions carry the
        // float rounding of pos * inv_freq (relative 2^-24 of theta).
        const double tol =
            1e-6 + 3e-7 * std::fabs(theta) * (std::fabs(orig[a]) + std::fabs(orig[b]));
        EXPECT_NEAR(x[a], ra, tol) << neox << " pos " << pos << " i " << i;
        EXPECT_NEAR(x[b], rb, tol) << neox << " pos " << pos << " i " << i;
      }
      for (int64_t i = n_rot; i < head_dim; ++i) EXPECT_EQ(x[i], orig[i]);
    }
  }
  float v[4] = {1, 2, 3, 4};
  EXPECT_THROW(rope_inplace(v, 4, 3, 1, 10000.f, false), Error);
  EXPECT_THROW(rope_inplace(v, 4, 6, 1, 10000.f, true), Error);
}

TEST(Ops, AddAndScaleAdd) {
  const int64_t n = 37;
  auto x = rnd(n, 8), y = rnd(n, 9);
  const auto x0 = x;
  add_inplace(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(x[i], x0[i] + y[i]);
  auto acc = x0;
  scale_add_inplace(acc.data(), y.data(), 0.37f, n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(acc[i], x0[i] + 0.37 * y[i], 1e-6 * (std::fabs(x0[i]) + std::fabs(y[i])));
}

}  // namespace
}  // namespace moeflow
