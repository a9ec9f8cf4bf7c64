// The attention tile kernels (attn_math.h) against the pair-by-pair loops they must equal bit
// for bit, and against float64 sums: head sizes with and without the 16-float tiles' tails,
// query counts that leave every tile remainder, ragged key ranges (the causal edge, a sliding
// window's start, key counts that are not a multiple of the key tile, empty ranges).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/attn_math.h"

namespace moeflow {
namespace {

std::vector<float> attn_tile_random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

// Per query u: keys [lo, hi) as a prefill tile sees them: token u / heads of a causal prompt
// starting at pos0, window > 0 a sliding window; every fifth query an empty range.
void attn_tile_ranges(int nq, int heads, int64_t pos0, int64_t window, bool empties,
                      std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
  lo.assign(nq, 0);
  hi.assign(nq, 0);
  for (int u = 0; u < nq; ++u) {
    const int64_t n_pos = pos0 + u / heads + 1;
    hi[u] = n_pos;
    lo[u] = window > 0 ? std::max<int64_t>(0, n_pos - window) : 0;
    if (empties && u % 5 == 4) lo[u] = hi[u];
  }
}

struct AttnTileCase {
  int64_t hd;
  int nq, heads;
  int64_t pos0, window;
  bool empties;
};

std::string attn_tile_name(const AttnTileCase& c) {
  return "hd " + std::to_string(c.hd) + " queries " + std::to_string(c.nq) + "/" +
         std::to_string(c.heads) + " pos0 " + std::to_string(c.pos0) + " window " +
         std::to_string(c.window);
}

const AttnTileCase kAttnTileCases[] = {
    {256, 16, 2, 0, 0, false},   // gemma4's sliding heads, 8 tokens x 2 heads from the start
    {512, 16, 8, 37, 0, false},  // its global heads: 2 tokens x 8 heads, 38 keys (not 4k)
    {256, 13, 1, 5, 7, false},   // window start inside the tile, every query remainder (4/2/1)
    {64, 11, 1, 40, 16, true},   // empty ranges among the queries
    {40, 6, 2, 9, 0, false},     // 16k + 8: the 8-float tail, pair by pair
    {20, 3, 3, 2, 3, false},     // 16 + 4: the scalar tail
    {16, 1, 1, 0, 0, false},     // one query, one key
};

// The tiles checked against the dispatched pair loop: the dispatched one, and AVX2's wherever
// the pair loop is AVX2's arithmetic (any vector level: on an AVX-512 machine too, where
// dispatch never picks the AVX2 tile; MOEFLOW_SIMD=scalar gives other pair loops).
template <typename Fn>
std::vector<std::pair<const char*, Fn>> attn_tiles_to_check(Fn dispatched, Fn avx2,
                                                            bool pairs_are_avx2) {
  std::vector<std::pair<const char*, Fn>> v = {{"dispatched", dispatched}};
  if (pairs_are_avx2) v.push_back({"avx2", avx2});
  return v;
}

TEST(AttnTile, ScoresEqualThePairLoopBitForBit) {
  const DotF32Fn dot = attn_dot_fn();
  for (auto [tile_name, tile] :
       attn_tiles_to_check(attn_qk_tile_fn(), attn_qk_tile_avx2, dot == attn_dot_avx2)) {
    SCOPED_TRACE(tile_name);
    for (const AttnTileCase& c : kAttnTileCases) {
      std::vector<int64_t> lo, hi;
      attn_tile_ranges(c.nq, c.heads, c.pos0, c.window, c.empties, lo, hi);
      const int64_t n_keys = hi.back() + 3, k_stride = c.hd * 3 + 8;  // rows of a wider cache
      const auto q = attn_tile_random((size_t)c.nq * c.hd, 1),
                 k = attn_tile_random((size_t)n_keys * k_stride, 2);
      std::vector<const float*> qp(c.nq);
      for (int u = 0; u < c.nq; ++u) qp[u] = q.data() + u * c.hd;
      const float* kh = k.data() + c.hd;  // the second head of each row
      const float scale = 1.0f / std::sqrt((float)c.hd);
      // The whole rectangle, then each query's own range on its own (how the backend calls it).
      std::vector<float> s(c.nq * n_keys, NAN), s1(c.nq * n_keys, NAN);
      tile(qp.data(), c.nq, kh, k_stride, 0, n_keys, c.hd, scale, s.data(), n_keys);
      for (int u = 0; u < c.nq; ++u)
        tile(qp.data() + u, 1, kh, k_stride, lo[u], hi[u], c.hd, scale, s1.data() + u * n_keys,
             n_keys);
      for (int u = 0; u < c.nq; ++u)
        for (int64_t j = 0; j < n_keys; ++j) {
          const float want = dot(qp[u], kh + j * k_stride, c.hd) * scale;
          ASSERT_EQ(std::memcmp(&s[u * n_keys + j], &want, 4), 0)
              << attn_tile_name(c) << " query " << u << " key " << j;
          const bool in = j >= lo[u] && j < hi[u];
          if (in) {
            ASSERT_EQ(std::memcmp(&s1[u * n_keys + j], &want, 4), 0) << attn_tile_name(c);
          } else {
            ASSERT_TRUE(std::isnan(s1[u * n_keys + j])) << "wrote outside its range";
          }
          double ref = 0;
          for (int64_t i = 0; i < c.hd; ++i) ref += (double)qp[u][i] * kh[j * k_stride + i];
          ref *= scale;
          ASSERT_NEAR(s[u * n_keys + j], ref, 1e-5 * std::sqrt((double)c.hd)) << attn_tile_name(c);
        }
    }
  }
}

TEST(AttnTile, WeightedValuesEqualTheAxpyLoopBitForBit) {
  const AxpyF32Fn axpy = attn_axpy_fn();
  for (auto [tile_name, tile] :
       attn_tiles_to_check(attn_pv_tile_fn(), attn_pv_tile_avx2, axpy == attn_axpy_avx2)) {
    SCOPED_TRACE(tile_name);
    for (const AttnTileCase& c : kAttnTileCases) {
      const int64_t hdv = c.hd;
      std::vector<int64_t> lo, hi;
      attn_tile_ranges(c.nq, c.heads, c.pos0, c.window, c.empties, lo, hi);
      // More keys than the 16-key blocks, and windows that start inside one.
      for (int64_t& h : hi) h += 30;
      for (int u = 0; u < c.nq; ++u) {
        if (c.window > 0) lo[u] = std::min(hi[u], lo[u] + 30);
        if (c.empties && u % 5 == 4) lo[u] = hi[u];
      }
      const int64_t n_keys = hi.back() + 2, v_stride = hdv * 2 + 8;
      for (bool spread : {false, true}) {
        auto v = attn_tile_random((size_t)n_keys * v_stride, 3);
        auto p = attn_tile_random((size_t)c.nq * n_keys, 4);
        for (float& x : p) x = std::fabs(x) / 16;  // softmax weights
        if (spread) {
          // Weights from 1 down to e^-130 (subnormal below ~e^-87) and exact zeros, some value
          // rows all zero, some values tiny: the kernel's exact skip of terms that cannot change
          // the sum, next to accumulators that are still tiny themselves.
          std::mt19937 rng(5);
          std::uniform_real_distribution<float> e(-130.f, 0.f);
          for (size_t i = 0; i < p.size(); ++i) p[i] = i % 23 == 0 ? 0.f : std::exp(e(rng));
          for (size_t i = 0; i < v.size(); ++i)
            if (i % 7 == 0) v[i] *= 1e-30f;
          for (int64_t j = 3; j < n_keys; j += 11)
            std::fill(v.begin() + j * v_stride, v.begin() + (j + 1) * v_stride, 0.f);
        }
        const float* vh = v.data() + 8;
        std::vector<float> o((size_t)c.nq * hdv, NAN), want((size_t)c.nq * hdv, 0.f);
        const std::string what = attn_tile_name(c) + (spread ? " spread weights" : "");
        std::vector<float*> op(c.nq);
        for (int u = 0; u < c.nq; ++u) op[u] = o.data() + u * hdv;
        tile(op.data(), c.nq, p.data(), n_keys, lo.data(), hi.data(), vh, v_stride, hdv);
        for (int u = 0; u < c.nq; ++u) {
          float* w = want.data() + u * hdv;
          for (int64_t j = lo[u]; j < hi[u]; ++j)
            axpy(w, vh + j * v_stride, p[u * n_keys + j], hdv);
          ASSERT_EQ(std::memcmp(op[u], w, hdv * sizeof(float)), 0) << what << " query " << u;
          for (int64_t i = 0; i < hdv; ++i) {
            double ref = 0, mag = 0;
            for (int64_t j = lo[u]; j < hi[u]; ++j) {
              ref += (double)p[u * n_keys + j] * vh[j * v_stride + i];
              mag += std::fabs((double)p[u * n_keys + j] * vh[j * v_stride + i]);
            }
            ASSERT_NEAR(op[u][i], ref, 1e-6 * mag + 1e-30) << what;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace moeflow
