// AVX-512 (F/BW/VL/DQ + VNNI) kernels. K-quants unpack a whole 64-element chunk per zmm so the
// activation load is one contiguous 64-byte read; vpdpwssd fuses the per-sub-block scale
// multiply and the accumulation. 32-element blocks use 256-bit vpdpbusd (no saturation).
// Types without an entry here use the AVX2 kernels.
#include "backend/cpu/simd_intrinsics.h"

#include "backend/cpu/kquant_avx2.h"
#include "backend/cpu/kquant_avx512.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/simd_avx2_util.h"
#include "backend/cpu/unpack32_avx2.h"
#include "backend/cpu/unpack32_avx512.h"
#include "quant/blocks.h"

#include <cstring>

namespace moeflow::kernels {
namespace {

using namespace avx2;
using namespace avx512;

inline float hsum512(__m512 v) {
  const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return hsum(s);
}

// out[t] = hsum512(a[t]) for eight accumulators with the same additions in the same tree (lane i
// + lane i+8, then i + i+4, i + i+2, i + i+1), done for all eight at once: ~24 vector
// instructions instead of ~64, which was a few % of an 8-token tile on 2048-column rows.
inline void hsum512_x8(const __m512* a, float* out) {
  __m512 s[4], t[2];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)  // [a lo256 | b lo256] + [a hi256 | b hi256]
    s[p] = _mm512_add_ps(_mm512_insertf32x8(a[2 * p], _mm512_castps512_ps256(a[2 * p + 1]), 1),
                         _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 2
  for (int q = 0; q < 2; ++q)  // 128-bit lane j: token 4q + j, its lo128 + hi128
    t[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // Lane j: [x0 + x2, x1 + x3] of token j, then of token 4 + j.
  const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 r = _mm512_add_ps(u, _mm512_movehdup_ps(u));  // element 4j: token j, 4j+2: 4+j
  const __m512 o =
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 10, 6, 2, 12, 8, 4, 0), r);
  _mm256_storeu_ps(out, _mm512_castps512_ps256(o));
}

// The outputs of an NT-token kernel.
template <int NT>
inline void hsum_out(const __m512* acc, float* out) {
  if constexpr (NT == 8) {
    hsum512_x8(acc, out);
  } else {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) out[t] = hsum512(acc[t]);
  }
}

// ---- 32-element blocks x Q8_0 -----------------------------------------------------------------

// Two blocks per zmm: the low half holds block i's eight int32 partial sums, the high half
// block i + 1's, so each half runs exactly the float operations of the AVX2 kernel's even and
// odd accumulators (same lanes, same scale products, same order) and the results are the
// AVX2 level's bit for bit. The activation row carries its quants back to back offset to unsigned
// bytes (y + 128, see q8_0_quants_offset); per pair of weight blocks w (signed bytes) the kernel
// takes c = -128 sum(w) per group of four once (one vpdpbusd), and per token one vpdpbusd from c
// over 64 weights: (y + 128) . w - 128 sum(w) = y . w exactly, with one load per token (the
// quants) besides the scales. Until 2026-11-28 the weights were the offset side and each token
// loaded its own -128 sum(y) as the start value: on a Zen 4 EPYC, whose L1 serves one 512-bit
// load per cycle, the prefill tiles were bound by those loads (MXFP4 2880 x 2880 x 64 tokens,
// one thread: 4.1k -> 5.9k tok/s without that load).

template <typename B, int NT>
inline void block_pair(const B* w, const Act32<NT>& x, int64_t i, __m512* acc) {
  const __m512i s = unpack_pair_s(w[0], w[1]);
  const __m512i start = offset_start(s);
  const __m512 dw = scale_pair(w[0], w[1]);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const __m512i p =
        _mm512_dpbusd_epi32(start, _mm512_loadu_si512((const void*)(x.qs[t] + 32 * i)), s);
    const __m512 d2 = _mm512_loadu_ps(x.da8[t] + 8 * i);
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, d2), _mm512_cvtepi32_ps(p), acc[t]);
  }
}

// The last block of an odd count: into the low (even) half only, as the AVX2 kernel does.
template <typename B, int NT>
inline void block_single(const B& w, const Act32<NT>& x, int64_t i, __m512* acc) {
  const __m256i s = unpack(w);
  const __m256i start = offset_start(s);
  const float dw = scale(w);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const __m256i p =
        _mm256_dpbusd_epi32(start, _mm256_loadu_si256((const __m256i*)(x.qs[t] + 32 * i)), s);
    const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(dw * x.da[t][i]), _mm256_cvtepi32_ps(p),
                                      _mm512_castps512_ps256(acc[t]));
    acc[t] = _mm512_insertf32x8(acc[t], lo, 0);
  }
}

template <typename B, int NT>
void dot32(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const B* wb = static_cast<const B*>(w);
  const Act32<NT> x = act32<NT>(act, stride, n);
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    // Every line kPrefetchAhead bytes ahead, as the AVX2 kernels (see simd_avx2_util.h).
    prefetch_block<2 * sizeof(B)>(wb + i);
    block_pair<B, NT>(wb + i, x, i, acc);
  }
  if (i < nb) block_single<B, NT>(wb[i], x, i, acc);
  hsum_out<NT>(acc, out);
}

template <int NT>
void dot_q4_0(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot32<BlockQ4_0, NT>(n, w, a, s, o);
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

// The NT-token (prefill) kernel. The integer part stays vpmaddubsw + vpdpwssd per 64 weights
// and token: vpdpbusd sums of four would need repacking into int16 pairs before the scale
// multiply, and that measured slower (vpermt2w) or no faster (vpackssdw). The per-block float
// part takes d * ad and dmin * ad as two multiplies by the activation scale broadcast from
// memory instead of one multiply and three shuffles.
template <int NT, bool kFive>
void dot_q45_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  using B = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  const B* wb = static_cast<const B*>(w);
  const BlockQ8_K* a[NT];
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t] = _mm512_setzero_ps();
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  __m512i sidx[4], hshift[4];
#pragma GCC unroll 8
  for (int j = 0; j < 4; ++j) {
    sidx[j] = idx_pair(2 * j, 2 * j + 1);
    hshift[j] = idx_pair(2 * j, 2 * j + 1);  // qh bit 2j feeds the low nibbles, 2j+1 the high
  }
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const B& b = wb[i];
    prefetch_block<sizeof(B)>(wb + i);
    const __m128i scx = k4_scales_x(b.scales);
    const __m512i sc16 = k4_sc16(scx);
    __m512i qh;
    if constexpr (kFive) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)b.qh));
    __m512i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 4; ++j) {
      // Low nibbles of the 32 bytes (elements 64j..64j+31) then their high nibbles. The high
      // half shifts 64-bit lanes (one masked shift instead of a 16-bit shift and a blend); the
      // bits that cross into the byte below are cleared by the nibble mask.
      const __m512i raw =
          _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * j)));
      __m512i q = _mm512_and_si512(_mm512_mask_srli_epi64(raw, 0xF0, raw, 4), m4);
      if constexpr (kFive)
        q = _mm512_or_si512(
            q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, hshift[j]), one), 4));
      const __m512i s = _mm512_permutexvar_epi16(sidx[j], sc16);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        sumi[t] =
            _mm512_dpwssd_epi32(sumi[t], _mm512_maddubs_epi16(q, load_act64(a[t][i], 64 * j)), s);
    }
    const __m256i mn = k4_mn16(scx);
    const __m128 dh = k4_d_dmin(&b);
    // d and dmin in every lane: each token's products d * ad and dmin * ad are then one
    // multiply by the broadcast activation scale (the same roundings as the scalar products).
    const __m512 bd = _mm512_broadcastss_ps(dh), bm = _mm512_broadcastss_ps(_mm_movehdup_ps(dh));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& at = a[t][i];
      const __m256i msum = _mm256_madd_epi16(mn, _mm256_loadu_si256((const __m256i*)at.bsums));
      const __m512 ad = _mm512_set1_ps(at.d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(bd, ad), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(bm, ad),
                                _mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), acc[t]);
    }
  }
  hsum_out<NT>(acc, out);
}

// Multi-row prefetch: at block i each of the R row streams fetches its block
// i + kRowsPrefetchBlocks; past the row's end that is the same row of the next group of R rows
// (rows are contiguous: the next group's row k starts (R - 1) rows after row k ends).
constexpr int64_t kRowsPrefetchBlocks = 8;
template <int R, size_t Bytes>
inline void prefetch_rows(const uint8_t* w, size_t stride, int64_t i, int64_t nb) {
  const int64_t pi = i + kRowsPrefetchBlocks;
  const size_t off = (size_t)pi * Bytes + (pi >= nb ? (size_t)(R - 1) * stride : 0);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const char* p = reinterpret_cast<const char*>(w + r * stride + off);
#pragma GCC unroll 4
    for (size_t l = 0; l < (Bytes + 63) / 64; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T0);
  }
}

// R weight rows x one activation row: per row exactly the float operations of
// dot_q45_k<1, kFive> (same fmadd / fnmadd per block in block order, same hsum); the activation
// chunks and bsums are loaded once per block for all R rows.
template <int R, bool kFive>
void dot_q45_k_rows(int64_t n, const void* w, size_t stride, const void* act, float* out) {
  using B = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  const uint8_t* wr = static_cast<const uint8_t*>(w);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / QK_K;
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  __m512i sidx[4];
#pragma GCC unroll 8
  for (int j = 0; j < 4; ++j) sidx[j] = idx_pair(2 * j, 2 * j + 1);  // also the qh shifts
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_rows<R, sizeof(B)>(wr, stride, i, nb);
    const BlockQ8_K& at = a[i];
    __m512i y[4];
#pragma GCC unroll 8
    for (int j = 0; j < 4; ++j) y[j] = load_act64(at, 64 * j);
    const __m256i bs = _mm256_loadu_si256((const __m256i*)at.bsums);
    const __m128 ad = _mm_set1_ps(at.d);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const B& b = reinterpret_cast<const B*>(wr + r * stride)[i];
      const __m128i scx = k4_scales_x(b.scales);
      const __m512i sc16 = k4_sc16(scx);
      __m512i qh;
      if constexpr (kFive) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)b.qh));
      __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < 4; ++j) {
        const __m512i raw =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * j)));
        __m512i q = _mm512_and_si512(_mm512_mask_srli_epi64(raw, 0xF0, raw, 4), m4);
        if constexpr (kFive)
          q = _mm512_or_si512(
              q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sidx[j]), one), 4));
        const __m512i s = _mm512_permutexvar_epi16(sidx[j], sc16);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q, y[j]), s);
      }
      const __m256i msum = _mm256_madd_epi16(k4_mn16(scx), bs);
      const __m128 dd = _mm_mul_ps(k4_d_dmin(&b), ad);
      acc[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sumi), acc[r]);
      acc[r] = _mm512_fnmadd_ps(_mm512_broadcastss_ps(_mm_movehdup_ps(dd)),
                                _mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), acc[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) out[r] = hsum512(acc[r]);
}

constexpr int kQ45kRows = 8;

template <int NT>
void dot_q5_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_q45_k<NT, true>(n, w, a, s, o);
}

template <int NT>
void dot_q6_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const BlockQ6_K* wb = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* a[NT];
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t] = _mm512_setzero_ps();
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i shl = idx_pair(4, 2), shr = idx_pair(0, 2);
  __m512i sidx[4];
  for (int k = 0; k < 4; ++k) sidx[k] = idx_quad(4 * k);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ6_K& b = wb[i];
    prefetch_block<sizeof(BlockQ6_K)>(wb + i);
    const __m256i sc16_256 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales));
    const __m512i sc16 = _mm512_castsi256_si512(sc16_256);
    const float d = fp16(b.d);
    __m512i sumi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512((const void*)(b.ql + 64 * h));
      const __m512i qh =
          _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qh + 32 * h)));
      // Elements 128h + 0..63 and 128h + 64..127, each in element order.
      const __m512i qa = _mm512_or_si512(_mm512_and_si512(l, m4),
                                         _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
      const __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                         _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
      const __m512i sa = _mm512_permutexvar_epi16(sidx[2 * h], sc16);
      const __m512i sb = _mm512_permutexvar_epi16(sidx[2 * h + 1], sc16);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        sumi[t] = _mm512_dpwssd_epi32(sumi[t],
                                      _mm512_maddubs_epi16(qa, load_act64(a[t][i], 128 * h)), sa);
        sumi[t] = _mm512_dpwssd_epi32(
            sumi[t], _mm512_maddubs_epi16(qb, load_act64(a[t][i], 128 * h + 64)), sb);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& at = a[t][i];
      const __m256i bias = _mm256_slli_epi32(
          _mm256_madd_epi16(sc16_256, _mm256_loadu_si256((const __m256i*)at.bsums)), 5);
      const __m512i tot = _mm512_sub_epi32(sumi[t], _mm512_zextsi256_si512(bias));
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * at.d), _mm512_cvtepi32_ps(tot), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) out[t] = hsum512(acc[t]);
}

// Q2_K / Q3_K: each zmm holds two 2-bit planes of the same 32 bytes (64 elements in order).
// Q3_K adds its hmask bit and takes the -4 offset back through the bsums.
template <int NT, bool kThree>
void dot_q23_k(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  using B = std::conditional_t<kThree, BlockQ3_K, BlockQ2_K>;
  const B* wb = static_cast<const B*>(w);
  const BlockQ8_K* a[NT];
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) {
    a[t] = act_row<BlockQ8_K>(act, stride, t);
    acc[t] = _mm512_setzero_ps();
  }
  const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  const __m512i sh_a = idx_pair(0, 2), sh_b = idx_pair(4, 6);
  __m512i sidx[4], hsh[4];
  for (int k = 0; k < 4; ++k) {
    sidx[k] = idx_quad(4 * k);
    hsh[k] = idx_pair(2 * k, 2 * k + 1);
  }
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const B& b = wb[i];
    prefetch_block<sizeof(B)>(wb + i);
    __m256i sc16_256, mn16;
    if constexpr (kThree) {
      sc16_256 = q3k_scales(b.scales);
    } else {
      const __m128i raw = _mm_loadu_si128((const __m128i*)b.scales);
      sc16_256 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
      mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    }
    const __m512i sc16 = _mm512_castsi256_si512(sc16_256);
    const float d = fp16(b.d);
    __m512i hm;
    if constexpr (kThree) hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)b.hmask));
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i qs =
          _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(b.qs + 32 * h)));
      __m512i qa = _mm512_and_si512(_mm512_srlv_epi16(qs, sh_a), m3);
      __m512i qb = _mm512_and_si512(_mm512_srlv_epi16(qs, sh_b), m3);
      if constexpr (kThree) {
        qa = _mm512_or_si512(
            qa, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, hsh[2 * h]), one), 2));
        qb = _mm512_or_si512(
            qb, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, hsh[2 * h + 1]), one), 2));
      }
      const __m512i sa = _mm512_permutexvar_epi16(sidx[2 * h], sc16);
      const __m512i sb = _mm512_permutexvar_epi16(sidx[2 * h + 1], sc16);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        sumi[t] = _mm512_dpwssd_epi32(sumi[t],
                                      _mm512_maddubs_epi16(qa, load_act64(a[t][i], 128 * h)), sa);
        sumi[t] = _mm512_dpwssd_epi32(
            sumi[t], _mm512_maddubs_epi16(qb, load_act64(a[t][i], 128 * h + 64)), sb);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& at = a[t][i];
      const __m256i bs = _mm256_loadu_si256((const __m256i*)at.bsums);
      if constexpr (kThree) {
        const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(sc16_256, bs), 2);
        const __m512i tot = _mm512_sub_epi32(sumi[t], _mm512_zextsi256_si512(bias));
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * at.d), _mm512_cvtepi32_ps(tot), acc[t]);
      } else {
        const __m256i msum = _mm256_madd_epi16(mn16, bs);
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * at.d), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_set1_ps(fp16(b.dmin) * at.d),
                                  _mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), acc[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum512(acc[t]);
}

template <int NT>
void dot_q2_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_q23_k<NT, false>(n, w, a, s, o);
}
template <int NT>
void dot_q3_k(int64_t n, const void* w, const void* a, size_t s, float* o) {
  dot_q23_k<NT, true>(n, w, a, s, o);
}

// ---- float weights x float activations ------------------------------------------------------

enum class FKind { F32, F16, BF16 };

template <FKind K>
inline __m512 wload16(const void* w, int64_t i) {
  if constexpr (K == FKind::F32) return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  const __m256i h = _mm256_loadu_si256((const __m256i*)(static_cast<const uint16_t*>(w) + i));
  if constexpr (K == FKind::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
template <FKind K>
inline float wscalar(const void* w, int64_t i) {
  if constexpr (K == FKind::F32) return static_cast<const float*>(w)[i];
  const uint16_t v = static_cast<const uint16_t*>(w)[i];
  if constexpr (K == FKind::F16) return fp16(v);
  const uint32_t bits = (uint32_t)v << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <FKind K, int NT>
void dot_float(int64_t n, const void* w, const void* act, size_t stride, float* out) {
  const float* x[NT];
  __m512 acc0[NT], acc1[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    x[t] = act_row<float>(act, stride, t);
    acc0[t] = acc1[t] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 w0 = wload16<K>(w, i), w1 = wload16<K>(w, i + 16);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc1[t]);
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 w0 = wload16<K>(w, i);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc0[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float tail = 0;
    for (int64_t j = i; j < n; ++j) tail += wscalar<K>(w, j) * x[t][j];
    out[t] = hsum512(_mm512_add_ps(acc0[t], acc1[t])) + tail;
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

void fill_avx512_table(DotTable& t) {
  auto set = [&](GgmlType ty, DotFn f) { t.fn[(int)ty] = f; };
  set(GgmlType::F32, MOEFLOW_DOT_FN8(dot_f32));
  set(GgmlType::F16, MOEFLOW_DOT_FN8(dot_f16));
  set(GgmlType::BF16, MOEFLOW_DOT_FN8(dot_bf16));
  set(GgmlType::Q4_0, MOEFLOW_DOT_FN8(dot_q4_0));
  set(GgmlType::Q8_0, MOEFLOW_DOT_FN8(dot_q8_0));
  set(GgmlType::IQ4_NL, MOEFLOW_DOT_FN8(dot_iq4_nl));
  set(GgmlType::MXFP4, MOEFLOW_DOT_FN8(dot_mxfp4));
  set(GgmlType::Q2_K, MOEFLOW_DOT_FN8(dot_q2_k));
  set(GgmlType::Q3_K, MOEFLOW_DOT_FN8(dot_q3_k));
  set(GgmlType::Q5_K, MOEFLOW_DOT_FN8(dot_q5_k));
  set(GgmlType::Q6_K, MOEFLOW_DOT_FN8(dot_q6_k));
  auto rows = [&](GgmlType ty, RowsFn f, int r) {
    t.rows_fn[(int)ty] = f;
    t.rows[(int)ty] = r;
  };
  rows(GgmlType::Q5_K, dot_q45_k_rows<kQ45kRows, true>, kQ45kRows);
  // Q4_K: exact block sums and the 8-row prefill path (q4k_exact_avx512.cpp).
  fill_avx512_q4k_exact(t);
  fill_avx512_q4k_rows8(t);
  fill_avx512_mxfp4_rows8(t);
  fill_avx512_q8_0_rows8(t);
  fill_avx512_q5_0(t);
}

}  // namespace moeflow::kernels
