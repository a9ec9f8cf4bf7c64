#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attn_math.h"

namespace moeflow {

namespace {

// The end of attn_dot_avx2 and of every pair of the q.k tile: s0 + s1, the horizontal sum,
// then the scalar tail in order.
inline float finish_dot2(__m256 s0, __m256 s1, const float* a, const float* b, int64_t i,
                         int64_t n) {
  s0 = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float s = _mm_cvtss_f32(h);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

float attn_dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  return finish_dot2(s0, s1, a, b, i, n);
}

namespace {

// QB queries x KB keys with attn_dot_avx2's two accumulators per pair (the first and second 8
// floats of every 16, the 8-float tail into the first): each key row is loaded once for the QB
// queries and each query row once for the KB keys, and every score is attn_dot_avx2's bit for
// bit. 2 x 2 keeps the 8 accumulators and 6 loaded rows in the 16 ymm registers.
template <int QB, int KB>
inline void qk_block2(const float* const* q, const float* k, int64_t k_stride, int64_t j,
                      int64_t hd, float scale, float* s, int64_t s_stride) {
  __m256 a0[QB][KB], a1[QB][KB];
#pragma GCC unroll 4
  for (int a = 0; a < QB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < KB; ++b) a0[a][b] = a1[a][b] = _mm256_setzero_ps();
  const float* kr = k + j * k_stride;
  int64_t i = 0;
  for (; i + 16 <= hd; i += 16) {
    __m256 k0[KB], k1[KB];
#pragma GCC unroll 4
    for (int b = 0; b < KB; ++b) {
      k0[b] = _mm256_loadu_ps(kr + b * k_stride + i);
      k1[b] = _mm256_loadu_ps(kr + b * k_stride + i + 8);
    }
#pragma GCC unroll 4
    for (int a = 0; a < QB; ++a) {
      const __m256 q0 = _mm256_loadu_ps(q[a] + i), q1 = _mm256_loadu_ps(q[a] + i + 8);
#pragma GCC unroll 4
      for (int b = 0; b < KB; ++b) {
        a0[a][b] = _mm256_fmadd_ps(q0, k0[b], a0[a][b]);
        a1[a][b] = _mm256_fmadd_ps(q1, k1[b], a1[a][b]);
      }
    }
  }
  if (i + 8 <= hd) {
#pragma GCC unroll 4
    for (int a = 0; a < QB; ++a)
#pragma GCC unroll 4
      for (int b = 0; b < KB; ++b)
        a0[a][b] = _mm256_fmadd_ps(_mm256_loadu_ps(q[a] + i),
                                   _mm256_loadu_ps(kr + b * k_stride + i), a0[a][b]);
    i += 8;
  }
#pragma GCC unroll 4
  for (int a = 0; a < QB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < KB; ++b)
      s[a * s_stride + j + b] =
          finish_dot2(a0[a][b], a1[a][b], q[a], kr + b * k_stride, i, hd) * scale;
}

template <int QB>
void qk_rows2(const float* const* q, const float* k, int64_t k_stride, int64_t j0, int64_t j1,
              int64_t hd, float scale, float* s, int64_t s_stride) {
  int64_t j = j0;
  for (; j + 2 <= j1; j += 2) qk_block2<QB, 2>(q, k, k_stride, j, hd, scale, s, s_stride);
  for (; j < j1; ++j) qk_block2<QB, 1>(q, k, k_stride, j, hd, scale, s, s_stride);
}

}  // namespace

void attn_qk_tile_avx2(const float* const* q, int nq, const float* k, int64_t k_stride, int64_t j0,
                       int64_t j1, int64_t hd, float scale, float* s, int64_t s_stride) {
  int u = 0;
  for (; u + 2 <= nq; u += 2)
    qk_rows2<2>(q + u, k, k_stride, j0, j1, hd, scale, s + u * s_stride, s_stride);
  for (; u < nq; ++u)
    qk_rows2<1>(q + u, k, k_stride, j0, j1, hd, scale, s + u * s_stride, s_stride);
}

namespace {

// G queries x C vectors of 8 output columns from c, over each query's keys [lo[a], hi[a]): the
// accumulators stay in registers over the keys and every output element gets attn_axpy_avx2's
// one FMA per key in ascending key order, so the result is its loop's bit for bit. The keys all
// G queries take are walked together (one value load for all); the ragged ends of causal and
// window ranges query by query, before and after, which keeps each query's keys in order.
template <int G, int C>
void pv_cols2(float* const* o, const float* p, int64_t p_stride, const int64_t* lo,
              const int64_t* hi, const float* v, int64_t v_stride, int64_t c) {
  __m256 acc[G][C];
#pragma GCC unroll 4
  for (int a = 0; a < G; ++a)
#pragma GCC unroll 4
    for (int k = 0; k < C; ++k) acc[a][k] = _mm256_loadu_ps(o[a] + c + 8 * k);
  auto term = [&](int a, int64_t j) {
    const __m256 w = _mm256_set1_ps(p[a * p_stride + j]);
    const float* x = v + j * v_stride + c;
#pragma GCC unroll 4
    for (int k = 0; k < C; ++k)
      acc[a][k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + 8 * k), acc[a][k]);
  };
  int64_t c0 = lo[0], c1 = hi[0];
  for (int a = 1; a < G; ++a) c0 = std::max(c0, lo[a]), c1 = std::min(c1, hi[a]);
  if (c0 >= c1) c0 = c1 = INT64_MAX;  // nothing shared: every key is a "prefix" key
  for (int a = 0; a < G; ++a)
    for (int64_t j = lo[a]; j < std::min(hi[a], c0); ++j) term(a, j);
  for (int64_t j = c0; j < c1; ++j) {
    const float* x = v + j * v_stride + c;
    __m256 xv[C];
#pragma GCC unroll 4
    for (int k = 0; k < C; ++k) xv[k] = _mm256_loadu_ps(x + 8 * k);
#pragma GCC unroll 4
    for (int a = 0; a < G; ++a) {
      const __m256 w = _mm256_set1_ps(p[a * p_stride + j]);
#pragma GCC unroll 4
      for (int k = 0; k < C; ++k) acc[a][k] = _mm256_fmadd_ps(w, xv[k], acc[a][k]);
    }
  }
  for (int a = 0; a < G; ++a)
    for (int64_t j = std::max(lo[a], c1); j < hi[a]; ++j) term(a, j);
#pragma GCC unroll 4
  for (int a = 0; a < G; ++a)
#pragma GCC unroll 4
    for (int k = 0; k < C; ++k) _mm256_storeu_ps(o[a] + c + 8 * k, acc[a][k]);
}

// G queries, every column (hdv a multiple of 8): 8 accumulators per pass where the head allows.
template <int G>
void pv_group2(float* const* o, const float* p, int64_t p_stride, const int64_t* lo,
               const int64_t* hi, const float* v, int64_t v_stride, int64_t hdv) {
  constexpr int C = G >= 2 ? 8 / G : 4;
  int64_t c = 0;
  for (; c + 8 * C <= hdv; c += 8 * C) pv_cols2<G, C>(o, p, p_stride, lo, hi, v, v_stride, c);
  for (; c < hdv; c += 8) pv_cols2<G, 1>(o, p, p_stride, lo, hi, v, v_stride, c);
}

}  // namespace

void attn_pv_tile_avx2(float* const* o, int nq, const float* p, int64_t p_stride, const int64_t* lo,
                       const int64_t* hi, const float* v, int64_t v_stride, int64_t hdv) {
  for (int u = 0; u < nq; ++u) std::memset(o[u], 0, hdv * sizeof(float));
  if (hdv % 8 != 0) {  // attn_axpy_avx2's scalar tail: query by query
    for (int u = 0; u < nq; ++u)
      for (int64_t j = lo[u]; j < hi[u]; ++j)
        attn_axpy_avx2(o[u], v + j * v_stride, p[u * p_stride + j], hdv);
    return;
  }
  int u = 0;
  for (; u + 4 <= nq; u += 4)
    pv_group2<4>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, v, v_stride, hdv);
  for (; u + 2 <= nq; u += 2)
    pv_group2<2>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, v, v_stride, hdv);
  for (; u < nq; ++u)
    pv_group2<1>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, v, v_stride, hdv);
}

void attn_axpy_avx2(float* y, const float* x, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace moeflow
