// AVX2 decode kernels of MXFP4_R8 (mxfp4_rows8.h) and Q8_0_R8 (q8_0_rows8.h): the AVX-512
// kernels' plan (rows8_32_avx512.cpp) on each half of a group, rows 0-3 and rows 4-7 (bytes
// 32h .. 32h + 31 of every 64-byte chunk), taking turns every 32 blocks: the two halves' 16
// accumulators would not fit the 16 ymm registers. The integer sums of four are the same exact
// integers as the AVX2 one-row kernels' (Q8_0_R8: their own steps, |w| times y with w's sign,
// vpmaddubsw, vpmaddwd by ones; MXFP4_R8: unsigned w + 12 times y, the activation row's
// -12 x sum(y) per four added back, as the AVX-512 kernel), the float steps per lane too, and
// the final tree is hsum's: the bits of the base type here.
#include "backend/cpu/simd_intrinsics.h"

#include <algorithm>

#include "backend/cpu/mxfp4_rows8.h"
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/q8_0_rows8.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

struct Mxfp4 {
  static constexpr size_t kBlockBytes = mxfp4_rows8::kBlockBytes;
  // The weights as unsigned bytes w + 12 (0..24) against the signed quants, the activation row's
  // -12 x sum(y) per four (kernel_table.h, mxfp4_r8_row_corrections) added to each sum of four:
  // (w + 12) . y - 12 sum(y) = w . y, the integers of the sign trick in 4 instructions per vector
  // instead of 6 (both vpsignb gone, one vpaddd). The kernel is bound by its instructions, not
  // by memory; on the Emerald Rapids VM (2026-12-02, bench_micro BM_matvec_hot, one thread, 2
  // interleaved pairs) 12.1-12.3 -> 12.5-12.6 GB/s, gpt-oss decode at AVX2 1.008x (neutral; on
  // the Zen 4 it measured no faster). The rest is the scales' integer work and the unpacking.
  static constexpr bool kUnsigned = true;
  // Half h's 4 vectors of 4 rows x 8 columns.
  static void weights(const uint8_t* g, int h, __m256i* w) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i*)mxfp4_rows8::kValuesPlus12.data()));
    const __m256i lo = _mm256_loadu_si256((const __m256i*)(g + mxfp4_rows8::kLowOff + 32 * h));
    const __m256i hi = _mm256_loadu_si256((const __m256i*)(g + mxfp4_rows8::kHighOff + 32 * h));
    w[0] = _mm256_shuffle_epi8(table, _mm256_and_si256(lo, m4));
    w[1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4));
    w[2] = _mm256_shuffle_epi8(table, _mm256_and_si256(hi, m4));
    w[3] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(hi, 4), m4));
  }
  // Lanes 2r and 2r + 1: e8m0_half(e_r) x da for the half's 4 rows, the product the MXFP4
  // kernels scale by: 2^(e - 128) as (e - 1) << 23 for e >= 2, the two subnormals
  // 0x00200000 << e below, times da (one rounding).
  static __m256 scales(const uint8_t* g, int h, float da) {
    // Per 128-bit lane: int32 lane L <- byte L / 2 (+ 2 in the upper lane), the rest zero.
    const __m256i idx =
        _mm256_setr_epi8(0, -1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 1, -1, -1, -1,  //
                         2, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 3, -1, -1, -1);
    int32_t bytes;
    __builtin_memcpy(&bytes, g + mxfp4_rows8::kScaleOff + 4 * h, 4);
    const __m256i e = _mm256_shuffle_epi8(_mm256_set1_epi32(bytes), idx);
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    const __m256 s = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
    return _mm256_mul_ps(s, _mm256_set1_ps(da));
  }
};

struct Q80 {
  static constexpr size_t kBlockBytes = q8_0_rows8::kBlockBytes;
  static constexpr bool kUnsigned = false;  // signed quants: the sign trick
  static void weights(const uint8_t* g, int h, __m256i* w) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) w[k] = _mm256_loadu_si256((const __m256i*)(g + 64 * k + 32 * h));
  }
  // Lanes 2r and 2r + 1: d_r x da for the half's 4 rows (fp16 converted exactly, one rounding).
  static __m256 scales(const uint8_t* g, int h, float da) {
    const __m128 d =
        _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)(g + q8_0_rows8::kScaleOff + 8 * h)));
    const __m256 d2 = _mm256_set_m128(_mm_unpackhi_ps(d, d), _mm_unpacklo_ps(d, d));
    return _mm256_mul_ps(d2, _mm256_set1_ps(da));
  }
};

inline __m256i bcast8(const void* p) {
  int64_t v;
  __builtin_memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

// One half (rows 4h .. 4h + 3) of group block g into acc[0..3]; y: the token's 32 quants, corr:
// its 8 corrections of the block (unsigned weights only).
template <class F>
inline void half_block(const uint8_t* g, int h, const int8_t* y, const int32_t* corr, float da,
                       __m256* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i w[4];
  F::weights(g, h, w);
  const __m256 d = F::scales(g, h, da);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m256i p;
    if constexpr (F::kUnsigned)
      // Lane 2r + j: columns 8k + 4j .. 8k + 4j + 3 of row r, so correction 2k + j.
      p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w[k], bcast8(y + 8 * k)), ones),
                           bcast8(corr + 2 * k));
    else
      p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w[k], w[k]),
                                                 _mm256_sign_epi8(bcast8(y + 8 * k), w[k])),
                            ones);
    acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[k]);
  }
}

// Row r's result from the accumulators of its half (hsum's tree, simd_avx2_util.h): lane j of
// the even plus the odd accumulator, then j + j + 4, j + j + 2, j + j + 1.
inline void finish_half(const __m256* even, const __m256* odd, float* out4) {
  const __m256 c =
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(even[0], odd[0]), _mm256_add_ps(even[2], odd[2])),
                    _mm256_add_ps(_mm256_add_ps(even[1], odd[1]), _mm256_add_ps(even[3], odd[3])));
  // [r0 r1 r0 r1 | r2 r3 r2 r3] -> the half's 4 rows.
  const __m256 s = _mm256_hadd_ps(c, c);
  _mm_storeu_ps(out4, _mm_movelh_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

// Blocks per turn of the halves: 32 group blocks (4.3 KiB) are read from memory by the first
// half and from L1 by the second, and the weights stream on without waiting for a whole group
// (with one pass per half over the whole group, the DRAM rate fell below the GGUF kernel's).
// Two groups per call (the AVX-512 kernel's rows8x2), each group's turn after the other's, was
// slower here (Emerald Rapids VM, 2026-12-02, two threads from DRAM: Q8_0_R8 21-27 against 26.6
// GB/s, MXFP4_R8 17-18 against 20.8): this level has no two-group kernel of these types.
constexpr int64_t kTurnBlocks = 32;

template <class F>
void rows8(int64_t n, const void* w, size_t, const void* act, float* out) {
  constexpr size_t kBlockBytes = F::kBlockBytes, kPrefetchBytes = kTurnBlocks * kBlockBytes;
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(act);
  const float* da = q8_0_row_scales(act, n);
  const int32_t* corr = F::kUnsigned ? mxfp4_r8_row_corrections(act, n) : nullptr;
  auto corr_of = [&](int64_t i) { return F::kUnsigned ? corr + 8 * i : nullptr; };
  const uint8_t* g0 = static_cast<const uint8_t*>(w);
  const int64_t nb = n / 32, pairs_end = nb & ~(int64_t)1;
  __m256 acc[2][8];  // per half: even[4], odd[4]
  for (auto& h : acc)
    for (auto& v : h) v = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < pairs_end; i0 += kTurnBlocks) {
    const int64_t i1 = std::min(pairs_end, i0 + kTurnBlocks);
    for (int h = 0; h < 2; ++h) {
      __m256 even[4], odd[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) even[k] = acc[h][k], odd[k] = acc[h][4 + k];
      const uint8_t* g = g0 + i0 * kBlockBytes;
      for (int64_t i = i0; i < i1; i += 2, g += 2 * kBlockBytes) {
        // The pair one turn ahead, its first block's lines during the first half and the rest
        // during the second, so the stream from memory runs through both halves.
        const char* ahead = (const char*)g + kPrefetchBytes + (h == 0 ? 0 : kBlockBytes);
#pragma GCC unroll 5
        for (size_t l = 0; l < kBlockBytes + 64; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T1);
        half_block<F>(g, h, a[i].qs, corr_of(i), da[i], even);
        half_block<F>(g + kBlockBytes, h, a[i + 1].qs, corr_of(i + 1), da[i + 1], odd);
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) acc[h][k] = even[k], acc[h][4 + k] = odd[k];
    }
  }
  for (int h = 0; h < 2; ++h) {
    // The last block of an odd count: the even lanes only, as the one-row kernels.
    if (pairs_end < nb)
      half_block<F>(g0 + pairs_end * kBlockBytes, h, a[pairs_end].qs, corr_of(pairs_end),
                    da[pairs_end], acc[h]);
    finish_half(acc[h], acc[h] + 4, out + 4 * h);
  }
}

}  // namespace

void fill_avx2_mxfp4_rows8(DotTable& t) {
  fill_mxfp4_rows8_unpacked(t);  // rows past the last group, and prefill (mxfp4_rows8.cpp)
  t.rows_fn[kMxfp4R8Slot] = rows8<Mxfp4>;
}

void fill_avx2_q8_0_rows8(DotTable& t) {
  fill_q8_0_rows8_unpacked(t);  // rows past the last group, and prefill (q8_0_rows8.cpp)
  t.rows_fn[kQ80R8Slot] = rows8<Q80>;
}

}  // namespace moeflow::kernels
