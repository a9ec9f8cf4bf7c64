// AVX-512 tiles of attention's two inner loops (see attn_math.h): several queries against
// several keys per pass, each key / value row loaded once for all of them.
#include "backend/cpu/simd_intrinsics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/attn_math.h"

namespace moeflow {
namespace {

// ---- q.k ----------------------------------------------------------------------------------------

// attn_dot_avx2 keeps two ymm accumulators, s0 for the first and s1 for the second 8 floats of
// every 16: one zmm holds both (low half s0, high half s1), so one 512-bit FMA per 16 floats
// does exactly its two FMAs, and the end below is its s0 + s1 and horizontal sum.
inline float finish_dot(__m512 acc) {
  const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// QB queries x KB keys (keys j .. j + KB - 1), hd a multiple of 16: QB * KB accumulators,
// QB + KB loads per QB * KB FMAs.
template <int QB, int KB>
inline void qk_block(const float* const* q, const float* k, int64_t k_stride, int64_t j, int64_t hd,
                     float scale, float* s, int64_t s_stride) {
  __m512 acc[QB][KB];
#pragma GCC unroll 4
  for (int a = 0; a < QB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < KB; ++b) acc[a][b] = _mm512_setzero_ps();
  const float* kr = k + j * k_stride;
  for (int64_t i = 0; i < hd; i += 16) {
    __m512 kv[KB];
#pragma GCC unroll 4
    for (int b = 0; b < KB; ++b) kv[b] = _mm512_loadu_ps(kr + b * k_stride + i);
#pragma GCC unroll 4
    for (int a = 0; a < QB; ++a) {
      const __m512 qv = _mm512_loadu_ps(q[a] + i);
#pragma GCC unroll 4
      for (int b = 0; b < KB; ++b) acc[a][b] = _mm512_fmadd_ps(qv, kv[b], acc[a][b]);
    }
  }
#pragma GCC unroll 4
  for (int a = 0; a < QB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < KB; ++b) s[a * s_stride + j + b] = finish_dot(acc[a][b]) * scale;
}

template <int QB>
void qk_rows(const float* const* q, const float* k, int64_t k_stride, int64_t j0, int64_t j1,
             int64_t hd, float scale, float* s, int64_t s_stride) {
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) qk_block<QB, 4>(q, k, k_stride, j, hd, scale, s, s_stride);
  for (; j < j1; ++j) qk_block<QB, 1>(q, k, k_stride, j, hd, scale, s, s_stride);
}

// ---- p.v ----------------------------------------------------------------------------------------

// Subnormal floats: the softmax weights of keys that score ~87 below the best are subnormal
// (and weights a little above that give subnormal products), and every FMA that meets one takes
// a microcode assist of ~100+ cycles: measured on the 2-vCPU Xeon, 1% of such terms made the
// value loop 7x slower. Flushing them to zero would change results, so instead a term is left
// out only where it provably cannot change the accumulator: with |acc| >= 2^-100 a float's
// half ulp is >= 2^-124 (on both sides of acc, also at a power of two), and a term below 2^-125
// then rounds back to acc exactly, so fma(p, v, acc) == acc. "Tiny" below: p * max|v row| <
// 2^-125 (the row finite). Lanes whose accumulator is smaller (or NaN) still take the FMA.
constexpr float kTinyTerm = 0x1p-125f, kBigAcc = 0x1p-100f;

// One vector width of output columns: 16 (zmm) or, for the last 8 of a head, 8 (ymm). The FMA
// is element-wise, so either width gives each element attn_axpy_avx2's single fmadd.
struct Zmm {
  using T = __m512;
  static T load(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* y, T v) { _mm512_storeu_ps(y, v); }
  static T fma(float a, T x, T y) { return _mm512_fmadd_ps(_mm512_set1_ps(a), x, y); }
  // fma for a tiny term: only the lanes whose accumulator is below kBigAcc or NaN.
  static T fma_tiny(float a, T x, T y) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(y), _mm512_set1_ps(kBigAcc), _CMP_NGE_UQ);
    return m ? _mm512_mask3_fmadd_ps(_mm512_set1_ps(a), x, y, m) : y;
  }
};
struct Ymm {
  using T = __m256;
  static T load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* y, T v) { _mm256_storeu_ps(y, v); }
  static T fma(float a, T x, T y) { return _mm256_fmadd_ps(_mm256_set1_ps(a), x, y); }
  static T fma_tiny(float a, T x, T y) {
    const __m256 ay = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), y);
    const __mmask8 m = _mm256_cmp_ps_mask(ay, _mm256_set1_ps(kBigAcc), _CMP_NGE_UQ);
    return m ? _mm256_mask3_fmadd_ps(_mm256_set1_ps(a), x, y, m) : y;
  }
};

// The key block packed: row j at vb + (j - b0) * hdv, and per row the weight below which a
// term is tiny (tmax[j - b0]: 2^-125 / max|v|, 0 for a row with an infinity or NaN).
struct PackedValues {
  const float* vb;
  const float* tiny_below;
  int64_t b0, hdv;
};

// G queries over the keys [lo[a], hi[a]) (within the block), C column vectors from c: the G x C
// accumulators stay in registers over the block's keys, then go back to o (exact: a float
// stored and reloaded is the same float). Each accumulator is a chain of dependent FMAs, so
// G x C is kept at 8 (FMA latency x throughput) where the head allows. tiny[j - b0] bit a:
// query a's term of key j is tiny.
template <int G, int C, typename V>
inline void pv_cols(float* const* o, const float* p, int64_t p_stride, const int64_t* lo,
                    const int64_t* hi, const PackedValues& pk, const uint8_t* tiny, int64_t c) {
  constexpr int kW = sizeof(typename V::T) / sizeof(float);
  typename V::T acc[G][C];
#pragma GCC unroll 8
  for (int a = 0; a < G; ++a)
#pragma GCC unroll 8
    for (int k = 0; k < C; ++k) acc[a][k] = V::load(o[a] + c + k * kW);
  const float* vc = pk.vb + c;
  auto term = [&](int a, int64_t j) {
    const float w = p[a * p_stride + j];
    const float* x = vc + (j - pk.b0) * pk.hdv;
    const bool t = (tiny[j - pk.b0] >> a) & 1;
#pragma GCC unroll 8
    for (int k = 0; k < C; ++k)
      acc[a][k] = t ? V::fma_tiny(w, V::load(x + k * kW), acc[a][k])
                    : V::fma(w, V::load(x + k * kW), acc[a][k]);
  };
  // The keys every query of the group takes go through together (one value load for all);
  // the ragged ends of the causal / window ranges one query at a time, in key order.
  int64_t c0 = lo[0], c1 = hi[0];
#pragma GCC unroll 8
  for (int a = 1; a < G; ++a) c0 = std::max(c0, lo[a]), c1 = std::min(c1, hi[a]);
  if (c0 >= c1) c0 = c1 = INT64_MAX;  // nothing shared: every key below is a "prefix" key
#pragma GCC unroll 8
  for (int a = 0; a < G; ++a)
    for (int64_t j = lo[a]; j < std::min(hi[a], c0); ++j) term(a, j);
  for (int64_t j = c0; j < c1; ++j) {
    if (tiny[j - pk.b0] == 0) {
      const float* x = vc + (j - pk.b0) * pk.hdv;
      typename V::T xv[C];
#pragma GCC unroll 8
      for (int k = 0; k < C; ++k) xv[k] = V::load(x + k * kW);
#pragma GCC unroll 8
      for (int a = 0; a < G; ++a) {
        const float w = p[a * p_stride + j];
#pragma GCC unroll 8
        for (int k = 0; k < C; ++k) acc[a][k] = V::fma(w, xv[k], acc[a][k]);
      }
    } else {
#pragma GCC unroll 8
      for (int a = 0; a < G; ++a) term(a, j);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < G; ++a)
    for (int64_t j = std::max(lo[a], c1); j < hi[a]; ++j) term(a, j);
#pragma GCC unroll 8
  for (int a = 0; a < G; ++a)
#pragma GCC unroll 8
    for (int k = 0; k < C; ++k) V::store(o[a] + c + k * kW, acc[a][k]);
}

constexpr int64_t kMaxKeyBlock = 32;

// G queries, the keys [b0, b1) of the packed block, every column.
template <int G>
void pv_group(float* const* o, const float* p, int64_t p_stride, const int64_t* lo,
              const int64_t* hi, const PackedValues& pk, int64_t b1) {
  int64_t l[G], h[G];
  bool any = false;
  for (int a = 0; a < G; ++a) {
    l[a] = std::max(lo[a], pk.b0);
    h[a] = std::max(l[a], std::min(hi[a], b1));
    any |= l[a] < h[a];
  }
  if (!any) return;
  uint8_t tiny[kMaxKeyBlock] = {};
  for (int a = 0; a < G; ++a)
    for (int64_t j = l[a]; j < h[a]; ++j)
      tiny[j - pk.b0] |= (uint8_t)((p[a * p_stride + j] < pk.tiny_below[j - pk.b0]) << a);
  constexpr int C = 8 / G;
  int64_t c = 0;
  for (; c + 16 * C <= pk.hdv; c += 16 * C) pv_cols<G, C, Zmm>(o, p, p_stride, l, h, pk, tiny, c);
  for (; c + 16 <= pk.hdv; c += 16) pv_cols<G, 1, Zmm>(o, p, p_stride, l, h, pk, tiny, c);
  if (c < pk.hdv) pv_cols<G, 1, Ymm>(o, p, p_stride, l, h, pk, tiny, c);
}

// Copies the value rows [b0, b1) to buf and sets their tiny-term bounds.
void pack_values(const float* v, int64_t v_stride, int64_t b0, int64_t b1, int64_t hdv, float* buf,
                 float* tiny_below) {
  const __m512 inf = _mm512_set1_ps(INFINITY);
  for (int64_t j = b0; j < b1; ++j) {
    const float* src = v + j * v_stride;
    float* dst = buf + (j - b0) * hdv;
    __m512 mx = _mm512_setzero_ps();
    __mmask16 bad = 0;
    int64_t i = 0;
    for (; i + 16 <= hdv; i += 16) {
      const __m512 x = _mm512_loadu_ps(src + i);
      _mm512_storeu_ps(dst + i, x);
      const __m512 ax = _mm512_abs_ps(x);
      bad |= _mm512_cmp_ps_mask(ax, inf, _CMP_NLT_UQ);  // infinity or NaN
      mx = _mm512_max_ps(mx, ax);
    }
    float m = _mm512_reduce_max_ps(mx);
    for (; i < hdv; ++i) {
      dst[i] = src[i];
      if (!(std::fabs(src[i]) < INFINITY)) bad = 1;
      m = std::max(m, std::fabs(src[i]));
    }
    // An all-zero row: every term is tiny (no division by zero for UBSan).
    tiny_below[j - b0] = bad ? 0.0f : m > 0 ? kTinyTerm / m : INFINITY;
  }
}

}  // namespace

void attn_qk_tile_avx512(const float* const* q, int nq, const float* k, int64_t k_stride,
                         int64_t j0, int64_t j1, int64_t hd, float scale, float* s,
                         int64_t s_stride) {
  if (hd % 16 != 0) {  // attn_dot_avx2's 8-float and scalar tails: pair by pair
    for (int u = 0; u < nq; ++u)
      for (int64_t j = j0; j < j1; ++j)
        s[u * s_stride + j] = attn_dot_avx2(q[u], k + j * k_stride, hd) * scale;
    return;
  }
  int u = 0;
  for (; u + 4 <= nq; u += 4)
    qk_rows<4>(q + u, k, k_stride, j0, j1, hd, scale, s + u * s_stride, s_stride);
  for (; u + 2 <= nq; u += 2)
    qk_rows<2>(q + u, k, k_stride, j0, j1, hd, scale, s + u * s_stride, s_stride);
  for (; u < nq; ++u) qk_rows<1>(q + u, k, k_stride, j0, j1, hd, scale, s + u * s_stride, s_stride);
}

void attn_pv_tile_avx512(float* const* o, int nq, const float* p, int64_t p_stride,
                         const int64_t* lo, const int64_t* hi, const float* v, int64_t v_stride,
                         int64_t hdv) {
  for (int u = 0; u < nq; ++u) std::memset(o[u], 0, hdv * sizeof(float));
  if (hdv % 8 != 0) {  // attn_axpy_avx2's scalar tail: query by query
    for (int u = 0; u < nq; ++u)
      for (int64_t j = lo[u]; j < hi[u]; ++j)
        attn_axpy_avx2(o[u], v + j * v_stride, p[u * p_stride + j], hdv);
    return;
  }
  // Key blocks in ascending order, each copied to a packed buffer first: the cache's value
  // rows lie n_head_kv heads apart (4-8 KiB), so the same column of consecutive rows falls in
  // one L1 set and the column passes below would miss on every row. The block is read once
  // from the cache, then from L1 by every query group and column pass.
  const int64_t kb = std::clamp<int64_t>(4096 / hdv, 4, kMaxKeyBlock);
  thread_local std::vector<float> buf;
  if ((int64_t)buf.size() < kb * hdv) buf.resize((size_t)(kb * hdv));
  float tiny_below[kMaxKeyBlock];
  int64_t first = INT64_MAX, last = 0;
  for (int u = 0; u < nq; ++u)
    if (lo[u] < hi[u]) first = std::min(first, lo[u]), last = std::max(last, hi[u]);
  for (int64_t b0 = first; b0 < last; b0 += kb) {
    const int64_t b1 = std::min(last, b0 + kb);
    pack_values(v, v_stride, b0, b1, hdv, buf.data(), tiny_below);
    const PackedValues pk{buf.data(), tiny_below, b0, hdv};
    int u = 0;
    for (; u + 8 <= nq; u += 8)
      pv_group<8>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, pk, b1);
    for (; u + 4 <= nq; u += 4)
      pv_group<4>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, pk, b1);
    for (; u + 2 <= nq; u += 2)
      pv_group<2>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, pk, b1);
    for (; u < nq; ++u) pv_group<1>(o + u, p + u * p_stride, p_stride, lo + u, hi + u, pk, b1);
  }
}

}  // namespace moeflow
