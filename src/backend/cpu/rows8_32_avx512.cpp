// AVX-512 decode kernels of the 32-column-block interleaved types, MXFP4_R8 (mxfp4_rows8.h) and
// Q8_0_R8 (q8_0_rows8.h): 8 rows per call, all in the lanes. Per group block, four vectors of
// 8 rows x 8 columns of signed weights (MXFP4: two 64-byte loads, the nibbles through the value
// table; Q8_0: four loads as they lie), and per vector one vpdpbusd against a broadcast of the
// token's 8 activation bytes (unsigned, y + 128, from a start of -128 x the weights' sums of
// four; the same exact integers as the one-row kernels). The float side keeps the one-row
// kernels' lanes: the 8 sums of four of every row, even and odd blocks apart (8 accumulators,
// lane 2r + h of accumulator k = row r's lane 2k + h), each the same fma by the same scale
// product, summed at the end in hsum512's tree. So every row is the base type's AVX-512 (and
// AVX2) result bit for bit, without per-row horizontal sums and with one weight stream
// instead of eight.
#include "backend/cpu/simd_intrinsics.h"

#include <array>

#include "backend/cpu/mxfp4_rows8.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/q8_0_rows8.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

// -128 x the sum of every four of w's signed bytes (cancels the + 128 of the activation bytes).
inline __m512i offset_start(__m512i w) {
  return _mm512_sub_epi32(
      _mm512_setzero_si512(),
      _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w));
}

inline __m512i bcast8(const uint8_t* p) {
  return _mm512_broadcastq_epi64(_mm_loadl_epi64((const __m128i*)p));
}

struct Mxfp4 {
  static constexpr size_t kBlockBytes = mxfp4_rows8::kBlockBytes;
  // The weights as unsigned bytes w + 12 against the signed quants, each vpdpbusd starting from
  // the activation row's -12 x sum(y) per four (kernel_table.h, mxfp4_r8_row_corrections): the
  // same integers as -128 x sum(w) per weight vector and the unsigned quants, without the 8
  // instructions per block that start value took.
  static constexpr bool kUnsigned = true;
  static void weights(const uint8_t* g, __m512i* w) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)mxfp4_rows8::kValuesPlus12.data()));
    const __m512i lo = _mm512_loadu_si512(g + mxfp4_rows8::kLowOff),
                  hi = _mm512_loadu_si512(g + mxfp4_rows8::kHighOff);
    w[0] = _mm512_shuffle_epi8(table, _mm512_and_si512(lo, m4));
    w[1] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(lo, 4), m4));
    w[2] = _mm512_shuffle_epi8(table, _mm512_and_si512(hi, m4));
    w[3] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(hi, 4), m4));
  }
  // Lanes 2r and 2r + 1: e8m0_half(e_r) x da (nt_dispatch.h), the product the MXFP4 kernels
  // scale by: da x 2^(e - 128), which vscalefps forms with the one rounding of that product
  // (subnormal results included: nothing in moeflow sets DAZ or FTZ) in 4 instructions, not 8.
  static __m512 scales(const uint8_t* g, float da) {
    // Byte 4L of the broadcast qword <- byte L / 2 (row L / 2's exponent), the other bytes zero.
    const __m512i idx =
        _mm512_set_epi8(-1, -1, -1, 7, -1, -1, -1, 7, -1, -1, -1, 6, -1, -1, -1, 6,  //
                        -1, -1, -1, 5, -1, -1, -1, 5, -1, -1, -1, 4, -1, -1, -1, 4,  //
                        -1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1, 2, -1, -1, -1, 2,  //
                        -1, -1, -1, 1, -1, -1, -1, 1, -1, -1, -1, 0, -1, -1, -1, 0);
    const __m512i e = _mm512_shuffle_epi8(bcast8(g + mxfp4_rows8::kScaleOff), idx);
    const __m512 k = _mm512_sub_ps(_mm512_cvtepi32_ps(e), _mm512_set1_ps(128.f));
    return _mm512_scalef_ps(_mm512_set1_ps(da), k);
  }
};

struct Q80 {
  static constexpr size_t kBlockBytes = q8_0_rows8::kBlockBytes;
  static constexpr bool kUnsigned = false;  // signed quants, -128 x sum(w) per weight vector
  static void weights(const uint8_t* g, __m512i* w) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) w[k] = _mm512_loadu_si512(g + 64 * k);
  }
  // Lanes 2r and 2r + 1: d_r x da, the fp16 scale converted exactly, one rounding of the product.
  static __m512 scales(const uint8_t* g, float da) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(g + q8_0_rows8::kScaleOff)));
    const __m512 d2 =
        _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0),
                              _mm512_castps256_ps512(d));
    return _mm512_mul_ps(d2, _mm512_set1_ps(da));
  }
};

// The token's block i: its quants (unsigned y + 128 back to back, and signed in the Q8_0
// block), its float scale, and for unsigned weights its correction start values.
struct TokenBlock {
  const uint8_t* yu;
  const int8_t* ys;
  const int32_t* corr;
  float da;
};

// One group block into acc[0..3] (columns 8k .. 8k + 7 in accumulator k).
template <class F>
inline void block(const uint8_t* g, const TokenBlock& y, __m512* acc) {
  __m512i w[4];
  F::weights(g, w);
  const __m512 d = F::scales(g, y.da);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m512i p;
    if constexpr (F::kUnsigned)
      p = _mm512_dpbusd_epi32(bcast8((const uint8_t*)(y.corr + 2 * k)), w[k],
                              bcast8((const uint8_t*)(y.ys + 8 * k)));
    else
      p = _mm512_dpbusd_epi32(offset_start(w[k]), bcast8(y.yu + 8 * k), w[k]);
    acc[k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[k]);
  }
}

// hsum512's tree per row: lane j + lane j + 8 (even + odd), then j + j + 4, j + j + 2, j + j + 1.
inline void finish(const __m512* even, const __m512* odd, float* out) {
  __m512 a[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) a[k] = _mm512_add_ps(even[k], odd[k]);
  const __m512 c = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
  // Lanes 2r + 2r + 1, row r's result in the low float of each qword.
  const __m512 s =
      _mm512_add_ps(c, _mm512_castsi512_ps(_mm512_srli_epi64(_mm512_castps_si512(c), 32)));
  _mm256_storeu_ps(out,
                   _mm512_castps512_ps256(_mm512_permutexvar_ps(
                       _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0), s)));
}

// The activation row's views a kernel reads per block.
template <class F>
struct TokenRow {
  const uint8_t* yu;
  const float* da;
  const BlockQ8_0* yb;
  const int32_t* corr;
  TokenRow(const void* act, int64_t n)
      : yu(q8_0_row_quants_u8(act, n)),
        da(q8_0_row_scales(act, n)),
        yb(static_cast<const BlockQ8_0*>(act)),
        corr(F::kUnsigned ? mxfp4_r8_row_corrections(act, n) : nullptr) {}
  TokenBlock operator()(int64_t i) const {
    return TokenBlock{yu + 32 * i, yb[i].qs, F::kUnsigned ? corr + 8 * i : nullptr, da[i]};
  }
};

// The weight stream is prefetched ~3 KiB ahead into L2 (T1), whole blocks (MXFP4_R8 23,
// Q8_0_R8 12), as the AVX2 kernels' kPrefetchAhead. It was 8 blocks, 1.1 KiB of MXFP4_R8: on the
// Emerald Rapids VM (bench_micro BM_matvec, 2 threads, 2 MiB pages, 2026-12-02) MXFP4_R8
// 2880 x 2880 streamed 20.6-22.4 GB/s at 8 blocks and 25.0-25.3 at 24; Q8_0_R8 14336 x 4096
// 27.2-28.8 at 8 blocks, 28.3-29.9 at 12, 27.1-29.5 at 24.
template <class F>
constexpr size_t kPrefetchBytes = F::kBlockBytes*((3072 + F::kBlockBytes - 1) / F::kBlockBytes);

template <class F>
inline void prefetch_pair(const uint8_t* p) {
#pragma GCC unroll 10
  for (size_t l = 0; l < 2 * F::kBlockBytes + 64; l += 64)
    _mm_prefetch((const char*)p + l, _MM_HINT_T1);
}

template <class F>
void rows8(int64_t n, const void* w, size_t, const void* act, float* out) {
  constexpr size_t kB = F::kBlockBytes;
  const uint8_t* g = static_cast<const uint8_t*>(w);
  const TokenRow<F> token(act, n);
  __m512 even[4], odd[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) even[k] = odd[k] = _mm512_setzero_ps();
  const int64_t nb = n / 32;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2, g += 2 * kB) {
    prefetch_pair<F>(g + kPrefetchBytes<F>);
    block<F>(g, token(i), even);
    block<F>(g + kB, token(i + 1), odd);
  }
  // The last block of an odd count: the even lanes only, as the one-row kernels.
  if (i < nb) block<F>(g, token(i), even);
  finish(even, odd, out);
}

// Two consecutive groups (16 rows), block by block side by side: each group's operations are
// rows8's, in its order, so its bits too. What changes is the memory side: two sequential
// weight streams instead of one. On the Emerald Rapids VM (2026-12-02, a synthetic stream of
// 512-bit loads with k vpdpbusd per line, two threads, 2 MiB pages) one stream read 34.0 / 32.4 /
// 31.1 / 29.0 GB/s at k = 0 / 4 / 8 / 12 and two streams 24-64 KiB apart 36.1-37.3 / 34.6-36.1 /
// 34.3-36.3 / 31.2-33.2 (the membw bar 35-37): a core busy computing keeps more lines in flight
// with two streams. Each stream's prefetch that runs past its group skips the other group, so
// the next call's two groups (matvec walks a thread's rows front to back, 16 at a time) are on
// their way when it starts.
template <class F>
void rows8x2(int64_t n, const void* w, size_t, const void* act, float* out) {
  constexpr size_t kB = F::kBlockBytes;
  const int64_t nb = n / 32;
  const size_t group = (size_t)nb * kB;
  const uint8_t* ga = static_cast<const uint8_t*>(w);
  const uint8_t* gb = ga + group;
  const uint8_t* const a_end = gb;  // group A ends where group B starts
  const uint8_t* const b_end = gb + group;
  const TokenRow<F> token(act, n);
  __m512 ea[4], oa[4], eb[4], ob[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) ea[k] = oa[k] = eb[k] = ob[k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2, ga += 2 * kB, gb += 2 * kB) {
    prefetch_pair<F>(two_group_ahead(ga, kPrefetchBytes<F>, a_end, group));
    prefetch_pair<F>(two_group_ahead(gb, kPrefetchBytes<F>, b_end, group));
    const TokenBlock t0 = token(i), t1 = token(i + 1);
    block<F>(ga, t0, ea);
    block<F>(gb, t0, eb);
    block<F>(ga + kB, t1, oa);
    block<F>(gb + kB, t1, ob);
  }
  if (i < nb) {
    const TokenBlock t = token(i);
    block<F>(ga, t, ea);
    block<F>(gb, t, eb);
  }
  finish(ea, oa, out);
  finish(eb, ob, out + 8);
}

}  // namespace

void fill_avx512_mxfp4_rows8(DotTable& t) {
  fill_mxfp4_rows8_unpacked(t);  // rows past the last group, and prefill (mxfp4_rows8.cpp)
  t.rows_fn[kMxfp4R8Slot] = rows8<Mxfp4>;
  t.rows2_fn[kMxfp4R8Slot] = rows8x2<Mxfp4>;
}

void fill_avx512_q8_0_rows8(DotTable& t) {
  fill_q8_0_rows8_unpacked(t);  // rows past the last group, and prefill (q8_0_rows8.cpp)
  t.rows_fn[kQ80R8Slot] = rows8<Q80>;
  t.rows2_fn[kQ80R8Slot] = rows8x2<Q80>;
}

}  // namespace moeflow::kernels
