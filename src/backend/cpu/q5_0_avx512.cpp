// Q5_0 x Q8_0 at AVX-512 in llama.cpp's summation order (docs/kernels.md, "Q5_0's summation
// order"): per row and token one 8-lane accumulator, the blocks in sequence, lane k += (d_w *
// d_a) x (the block's products of elements 4k..4k+3) by FMA, the lanes reduced at the end as
// vec_dot_avx2.cpp's dot32<B, NT, true> does (the same bits at AVX2, AVX-512 and scalar).
//
// One row's chain of FMAs is 4 cycles a block, more than a block's other work on one token, so
// the decode and prefill paths put two rows' block i in one zmm (row r in the low half, r + 1 in
// the high) and run several such pairs at once: each token's activation block is broadcast to
// both halves with a load, its scale with another, and every row keeps its own chain, with no
// shuffle per token. The single-row kernel (rows past the last group of 8) does the same per
// pair of blocks of one row, whose halves it must extract.
#include "backend/cpu/simd_intrinsics.h"

#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/simd_avx2_util.h"
#include "backend/cpu/unpack32_avx2.h"
#include "backend/cpu/unpack32_avx512.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

using namespace avx2;
using namespace avx512;

// One row against NT tokens.
template <int NT>
void dot_q5_0(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ5_0* wb = static_cast<const BlockQ5_0*>(w);
  const Act32<NT> x = act32<NT>(act, stride, n);
  __m256 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    prefetch_block<2 * sizeof(BlockQ5_0)>(wb + i);
    const __m512i s = unpack_pair_s(wb[i], wb[i + 1]);
    const __m512i start = offset_start(s);
    const __m512 dw = scale_pair(wb[i], wb[i + 1]);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512i p =
          _mm512_dpbusd_epi32(start, _mm512_loadu_si512((const void*)(x.qs[t] + 32 * i)), s);
      const __m512 d = _mm512_mul_ps(dw, _mm512_loadu_ps(x.da8[t] + 8 * i));
      const __m512 f = _mm512_cvtepi32_ps(p);
      acc[t] = _mm256_fmadd_ps(_mm512_castps512_ps256(d), _mm512_castps512_ps256(f), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm512_extractf32x8_ps(d, 1), _mm512_extractf32x8_ps(f, 1), acc[t]);
    }
  }
  if (i < nb) {
    const __m256i s = unpack(wb[i]);
    const __m256i start = offset_start(s);
    const float dw = scale(wb[i]);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m256i p =
          _mm256_dpbusd_epi32(start, _mm256_loadu_si256((const __m256i*)(x.qs[t] + 32 * i)), s);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x.da[t][i]), _mm256_cvtepi32_ps(p), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}

// Eight rows (row r at w + r * w_stride bytes) against NT tokens: out[t * 8 + r]. P pairs of
// rows at a time, P x NT accumulators (at most 8, with the pairs' weights and the temporaries in
// the 32 registers); one token runs four pairs, eight chains.
template <int NT>
void rows8(int64_t n, const uint8_t* w, size_t w_stride, const void* act, size_t stride,
           float* out) {
  constexpr int P = NT <= 2 ? 4 : NT <= 4 ? 2 : 1;
  const Act32<NT> x = act32<NT>(act, stride, n);
  const int64_t nb = n / 32;
#pragma GCC unroll 1
  for (int p0 = 0; p0 < 4; p0 += P) {
    const BlockQ5_0* r[2 * P];
#pragma GCC unroll 8
    for (int j = 0; j < 2 * P; ++j)
      r[j] = reinterpret_cast<const BlockQ5_0*>(w + (size_t)(2 * p0 + j) * w_stride);
    __m512 acc[P][NT];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) acc[p][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      // The same rows of the next group of 8 (rows lie back to back: short rows make the group
      // one region, so this streams the next group while this one computes).
#pragma GCC unroll 8
      for (int j = 0; j < 2 * P; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(r[j] + i) + 8 * w_stride, _MM_HINT_T2);
      __m512i s[P], start[P];
      __m512 dw[P];
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        s[p] = unpack_pair_s(r[2 * p][i], r[2 * p + 1][i]);
        start[p] = offset_start(s[p]);
        dw[p] = scale_pair(r[2 * p][i], r[2 * p + 1][i]);
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m512i a =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x.qs[t] + 32 * i)));
        const __m512 da = _mm512_set1_ps(x.da[t][i]);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p)
          acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], da),
                                      _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[p], a, s[p])),
                                      acc[p][t]);
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        out[t * 8 + 2 * (p0 + p)] = hsum(_mm512_castps512_ps256(acc[p][t]));
        out[t * 8 + 2 * (p0 + p) + 1] = hsum(_mm512_extractf32x8_ps(acc[p][t], 1));
      }
  }
}

// matvec's multi-row kernel (RowsFn).
void rows8_matvec(int64_t n, const void* w, size_t w_stride, const void* act, float* out) {
  rows8<1>(n, static_cast<const uint8_t*>(w), w_stride, act, 0, out);
}

// matmul's 8-row kernel over the group as it lies in the matrix (groups8: 8 consecutive rows).
template <int NT>
void groups8(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  rows8<NT>(n, static_cast<const uint8_t*>(w), (size_t)(n / 32) * sizeof(BlockQ5_0), act, stride,
            out);
}

}  // namespace

void fill_avx512_q5_0(DotTable& t) {
  const int k = type_slot(GgmlType::Q5_0);
  t.fn[k] = MOEFLOW_DOT_FN8(dot_q5_0);
  t.rows_fn[k] = rows8_matvec;
  t.rows[k] = 8;
  // Its own prefetch of the next group serves rows of any length (measured: docs/kernels.md).
  t.rows_any_length[k] = true;
  t.groups8[k] = MOEFLOW_DOT_FN8(groups8);
}

}  // namespace moeflow::kernels
