// AVX2 + FMA kernels. Integer products use maddubs (unsigned weight bytes x signed activation
// bytes); per-block integer sums are scaled into float accumulators with one FMA per token.
#include "backend/cpu/kquant_avx2.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/simd_avx2_util.h"
#include "backend/cpu/unpack32_avx2.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

using namespace avx2;

// ---- 32-element blocks x Q8_0 -----------------------------------------------------------------

// One block into acc[t] for every token (da[t]: token t's float block scales, broadcast from
// memory, a load that needs no shuffle port; dw * da is then one vector multiply, the rounding
// of the scalar product in every lane). Reading them from the row's x8 copies instead was 3-7%
// slower on the Q4_0 / MXFP4 tiles: the same load count, but 32 bytes per block and token.
template <typename B, int NT>
inline void block32(const B& w, const BlockQ8_0* const* a, const float* const* da, int64_t i,
                    __m256* acc) {
  const __m256i q = unpack(w);
  const __m256 dw = _mm256_set1_ps(scale(w));
  const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    const __m256i y = _mm256_loadu_si256((const __m256i*)a[t][i].qs);
    const __m256i p =
        _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), _mm256_set1_epi16(1));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(da[t] + i)),
                             _mm256_cvtepi32_ps(p), acc[t]);
  }
}

// Even and odd blocks go to separate accumulators to hide the FMA latency. kOneChain keeps one
// accumulator per token, the blocks in sequence: llama.cpp's order for Q5_0 (the one 32-block
// type it neither repacks nor tiles in another order), so that moeflow's Q5_0 products are its
// bits and the recurrent hybrids' Q5_0 files agree with it beyond the activation noise
// (docs/kernels.md, "Q5_0's summation order"); its price, a chain of FMAs at 4 cycles a block,
// hides behind the AVX2 unpacking.
template <typename B, int NT, bool kOneChain = false>
void dot32(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const B* wb = static_cast<const B*>(w);
  const BlockQ8_0* a[NT];
  const float* da[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_0>(act, stride, t);
    da[t] = q8_0_row_scales(a[t], n);
  }
  __m256 acc0[NT], acc1[NT];
  __m256* const odd = kOneChain ? acc0 : acc1;
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    prefetch_block<2 * sizeof(B)>(wb + i);
    block32<B, NT>(wb[i], a, da, i, acc0);
    block32<B, NT>(wb[i + 1], a, da, i + 1, odd);
  }
  if (i < nb) block32<B, NT>(wb[i], a, da, i, acc0);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) out[t] = hsum(kOneChain ? acc0[t] : _mm256_add_ps(acc0[t], acc1[t]));
}

template <int NT>
void dot_q4_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockQ4_0, NT>(n, w, a, s, o);
}
template <int NT>
void dot_q5_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockQ5_0, NT, true>(n, w, a, s, o);
}
template <int NT>
void dot_q8_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockQ8_0, NT>(n, w, a, s, o);
}
template <int NT>
void dot_iq4_nl(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockIQ4_NL, NT>(n, w, a, s, o);
}
template <int NT>
void dot_mxfp4(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockMXFP4, NT>(n, w, a, s, o);
}

// ---- K-quants x Q8_K --------------------------------------------------------------------------

template <int NT>
struct KAcc {
  const BlockQ8_K* a[NT];
  __m256 acc[NT];
  KAcc(const void* act, size_t stride) {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      a[t] = act_row<BlockQ8_K>(act, stride, t);
      acc[t] = _mm256_setzero_ps();
    }
  }
  void finish(float* out) {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  }
};

inline __m256i load_bsums(const BlockQ8_K& a) {
  return _mm256_loadu_si256((const __m256i*)a.bsums);
}

template <int NT>
void dot_q5_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ5_K* wb = static_cast<const BlockQ5_K*>(w);
  KAcc<NT> k(act, stride);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ5_K& b = wb[i];
    prefetch_block<sizeof(BlockQ5_K)>(wb + i);
    uint64_t sc8, mn8;
    k4_scales(b.scales, sc8, mn8);
    const __m256i sc = scales16x2(sc8);
    const float d = fp16(b.d), dmin = fp16(b.dmin);
    __m256i hb = _mm256_loadu_si256((const __m256i*)b.qh);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * j));
      const __m256i lo =
          _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(hb, two), 3));
      hb = _mm256_srli_epi16(hb, 2);
      const __m256i s_lo = scale_bcast(sc, 2 * j), s_hi = scale_bcast(sc, 2 * j + 1);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& a = k.a[t][i];
        const __m256i p_lo = _mm256_madd_epi16(mul_us(lo, load_act(a, 64 * j)), s_lo);
        const __m256i p_hi = _mm256_madd_epi16(mul_us(hi, load_act(a, 64 * j + 32)), s_hi);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p_lo, p_hi));
      }
    }
    const __m256i mn = mins16(mn8);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& a = k.a[t][i];
      const __m256i msum = _mm256_madd_epi16(mn, load_bsums(a));
      k.acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi[t]), k.acc[t]);
      k.acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a.d), _mm256_cvtepi32_ps(msum), k.acc[t]);
    }
  }
  k.finish(out);
}

// Q6_K: 6-bit unsigned q in [0, 63] is dotted as is; the -32 offset comes back through the
// activation's 16-element sums.
template <int NT>
void dot_q6_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ6_K* wb = static_cast<const BlockQ6_K*>(w);
  KAcc<NT> k(act, stride);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ6_K& b = wb[i];
    prefetch_block<sizeof(BlockQ6_K)>(wb + i);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales));
    alignas(32) int16_t sc[16];
    _mm256_store_si256((__m256i*)sc, sc16);
    const float d = fp16(b.d);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(b.ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256((const __m256i*)(b.qh + 32 * h));
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                             _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                             _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_and_si256(qh, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
#pragma GCC unroll 8
      for (int v = 0; v < 4; ++v) {
        const __m256i s = scale_pair(sc + 8 * h + 2 * v);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i p =
              _mm256_madd_epi16(mul_us(q[v], load_act(k.a[t][i], 128 * h + 32 * v)), s);
          sumi[t] = _mm256_add_epi32(sumi[t], p);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& a = k.a[t][i];
      const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_bsums(a)), 5);
      k.acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d),
                                 _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], bias)), k.acc[t]);
    }
  }
  k.finish(out);
}

// Q3_K: q = lo2 | hbit << 2 in [0, 7] minus 4; the -4 comes back through the bsums.
template <int NT>
void dot_q3_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ3_K* wb = static_cast<const BlockQ3_K*>(w);
  KAcc<NT> k(act, stride);
  const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ3_K& b = wb[i];
    prefetch_block<sizeof(BlockQ3_K)>(wb + i);
    const __m256i sc16 = q3k_scales(b.scales);
    alignas(32) int16_t sc[16];
    _mm256_store_si256((__m256i*)sc, sc16);
    const float d = fp16(b.d);
    const __m256i hm = _mm256_loadu_si256((const __m256i*)b.hmask);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * h));
#pragma GCC unroll 8
      for (int v = 0; v < 4; ++v) {
        const int bit = 4 * h + v;
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * v), m3);
        const __m256i hb = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hm, bit), 2), m4);
        const __m256i q = _mm256_or_si256(lo, hb);
        const __m256i s = scale_pair(sc + 8 * h + 2 * v);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_madd_epi16(mul_us(q, load_act(k.a[t][i], 128 * h + 32 * v)), s);
          sumi[t] = _mm256_add_epi32(sumi[t], p);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& a = k.a[t][i];
      const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load_bsums(a)), 2);
      k.acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d),
                                 _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], bias)), k.acc[t]);
    }
  }
  k.finish(out);
}

template <int NT>
void dot_q2_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ2_K* wb = static_cast<const BlockQ2_K*>(w);
  KAcc<NT> k(act, stride);
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ2_K& b = wb[i];
    prefetch_block<sizeof(BlockQ2_K)>(wb + i);
    const __m128i raw = _mm_loadu_si128((const __m128i*)b.scales);
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
    const __m256i mn16 =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    alignas(32) int16_t sc[16];
    _mm256_store_si256((__m256i*)sc, sc16);
    const float d = fp16(b.d), dmin = fp16(b.dmin);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = _mm256_loadu_si256((const __m256i*)(b.qs + 32 * h));
#pragma GCC unroll 8
      for (int v = 0; v < 4; ++v) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * v), m3);
        const __m256i s = scale_pair(sc + 8 * h + 2 * v);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_madd_epi16(mul_us(q, load_act(k.a[t][i], 128 * h + 32 * v)), s);
          sumi[t] = _mm256_add_epi32(sumi[t], p);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& a = k.a[t][i];
      const __m256i msum = _mm256_madd_epi16(mn16, load_bsums(a));
      k.acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d), _mm256_cvtepi32_ps(sumi[t]), k.acc[t]);
      k.acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a.d), _mm256_cvtepi32_ps(msum), k.acc[t]);
    }
  }
  k.finish(out);
}

template <int NT>
void dot_iq4_xs(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockIQ4_XS* wb = static_cast<const BlockIQ4_XS*>(w);
  KAcc<NT> k(act, stride);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockIQ4_XS& b = wb[i];
    prefetch_block<sizeof(BlockIQ4_XS)>(wb + i);
    const float d = fp16(b.d);
    __m256i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ++ib) {
      const int ls =
          ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      const __m256i s = _mm256_set1_epi16((int16_t)(ls - 32));
      const __m256i q = lookup16(kIq4nlValues, b.qs + 16 * ib);
      const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i y = _mm256_sign_epi8(load_act(k.a[t][i], 32 * ib), q);
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aq, y), s));
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      k.acc[t] =
          _mm256_fmadd_ps(_mm256_set1_ps(d * k.a[t][i].d), _mm256_cvtepi32_ps(sumi[t]), k.acc[t]);
  }
  k.finish(out);
}

// ---- float weights x float activations ------------------------------------------------------

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p, bool bf16) {
  const __m128i h = _mm_loadu_si128((const __m128i*)p);
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

enum class FKind { F32, F16, BF16 };

template <FKind K>
inline __m256 wload(const void* w, int64_t i) {
  if constexpr (K == FKind::F32)
    return load8(static_cast<const float*>(w) + i);
  else
    return load8(static_cast<const uint16_t*>(w) + i, K == FKind::BF16);
}
template <FKind K>
inline float wscalar(const void* w, int64_t i) {
  if constexpr (K == FKind::F32)
    return static_cast<const float*>(w)[i];
  else if constexpr (K == FKind::F16)
    return fp16(static_cast<const uint16_t*>(w)[i]);
  else {
    // Not core/fp16.h: its inline functions must not be instantiated with AVX flags (ODR).
    const uint32_t bits = (uint32_t) static_cast<const uint16_t*>(w)[i] << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

template <FKind K, int NT>
void dot_float(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const float* x[NT];
  __m256 acc0[NT], acc1[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    x[t] = act_row<float>(act, stride, t);
    acc0[t] = acc1[t] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = wload<K>(w, i), w1 = wload<K>(w, i + 8);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm256_fmadd_ps(w0, load8(x[t] + i), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(w1, load8(x[t] + i + 8), acc1[t]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 w0 = wload<K>(w, i);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc0[t] = _mm256_fmadd_ps(w0, load8(x[t] + i), acc0[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float tail = 0;
    for (int64_t j = i; j < n; ++j) tail += wscalar<K>(w, j) * x[t][j];
    out[t] = hsum(_mm256_add_ps(acc0[t], acc1[t])) + tail;
  }
}

template <int NT>
void dot_f32(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_float<FKind::F32, NT>(n, w, a, s, o);
}
template <int NT>
void dot_f16(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_float<FKind::F16, NT>(n, w, a, s, o);
}
template <int NT>
void dot_bf16(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_float<FKind::BF16, NT>(n, w, a, s, o);
}

}  // namespace

void fill_avx2_table(DotTable& t) {
  auto set = [&](GgmlType ty, DotFn f) { t.fn[(int)ty] = f; };
  set(GgmlType::F32, MOEFLOW_DOT_FN(dot_f32));
  set(GgmlType::F16, MOEFLOW_DOT_FN(dot_f16));
  set(GgmlType::BF16, MOEFLOW_DOT_FN(dot_bf16));
  set(GgmlType::Q4_0, MOEFLOW_DOT_FN(dot_q4_0));
  set(GgmlType::Q5_0, MOEFLOW_DOT_FN(dot_q5_0));
  set(GgmlType::Q8_0, MOEFLOW_DOT_FN(dot_q8_0));
  set(GgmlType::IQ4_NL, MOEFLOW_DOT_FN(dot_iq4_nl));
  set(GgmlType::MXFP4, MOEFLOW_DOT_FN(dot_mxfp4));
  // The K-quant kernels keep one accumulator per token, so eight tokens fit the 16 ymm registers
  // (the weight block is unpacked once for eight): 5-18% faster tiles than two 4-token calls
  // (bench_micro BM_matmul, 14336 x 4096 x 64 tokens, one thread). The 32-block kernels keep two
  // per token (even and odd blocks, the AVX-512 pairing) and spill at eight: 3-7% slower.
  set(GgmlType::Q2_K, MOEFLOW_DOT_FN8(dot_q2_k));
  set(GgmlType::Q3_K, MOEFLOW_DOT_FN8(dot_q3_k));
  set(GgmlType::Q5_K, MOEFLOW_DOT_FN8(dot_q5_k));
  set(GgmlType::Q6_K, MOEFLOW_DOT_FN8(dot_q6_k));
  set(GgmlType::IQ4_XS, MOEFLOW_DOT_FN8(dot_iq4_xs));
  // Q4_K: exact block sums and the 8-row prefill path (q4k_exact_avx2.cpp).
  fill_avx2_q4k_exact(t);
  fill_avx2_q4k_rows8(t);
  fill_avx2_mxfp4_rows8(t);
  fill_avx2_q8_0_rows8(t);
}

}  // namespace moeflow::kernels
