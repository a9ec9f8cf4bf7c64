#pragma once
// K-quant scale unpacking shared by the AVX2 and AVX-512 kernels. Internal linkage: see
// nt_dispatch.h.
#include <cmath>
#include <cstdlib>
#include <new>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels::avx2 {
namespace {

// Q4_K / Q5_K 6-bit scales and mins, one byte each (sc[0..7], m[0..7]). Returned in registers:
// building them with small stores and reading them back wide would stall store forwarding.
inline void k4_scales(const uint8_t* s, uint64_t& sc8, uint64_t& mn8) {
  uint64_t u01;
  uint32_t u2;
  std::memcpy(&u01, s, 8);
  std::memcpy(&u2, s + 8, 4);
  const uint32_t u0 = (uint32_t)u01, u1 = (uint32_t)(u01 >> 32);
  const uint32_t sc_lo = u0 & 0x3f3f3f3f, m_lo = u1 & 0x3f3f3f3f;
  const uint32_t sc_hi = (u2 & 0x0f0f0f0f) | ((u0 >> 2) & 0x30303030);
  const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0f) | ((u1 >> 2) & 0x30303030);
  sc8 = sc_lo | (uint64_t)sc_hi << 32;
  mn8 = m_lo | (uint64_t)m_hi << 32;
}

// The 8 scales as int16 in both 128-bit lanes, ready for scale_bcast.
inline __m256i scales16x2(uint64_t sc8) {
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
}

// Scale k (0..7) of scales16x2 in all 16 int16 lanes: one in-lane shuffle with a constant
// control, cheaper than a scalar extract + vmovd + vpbroadcastw per scale.
inline __m256i scale_bcast(__m256i sc, int k) {
  return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((2 * k) | (2 * k + 1) << 8)));
}

// Each of the 8 mins applies to two 16-element bsums.
inline __m256i mins16(uint64_t mn8) {
  const __m128i v = _mm_cvtsi64_si128((long long)mn8);
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

// The per-block metadata of 8 Q4_K rows for the 8-row packs (q4k_exact_*.cpp): every row's 8
// scales (sc) and 8 mins (mn) as one qword each, rows 0..3 in *_lo and 4..7 in *_hi, and the 8
// rows' d and dmin as floats in lanes 0..7.
struct K4Meta8 {
  __m256i sc_lo, sc_hi, mn_lo, mn_hi;
  __m256 d, dmin;
};
inline K4Meta8 k4_meta8(const uint8_t* const* blocks) {  // blocks[r]: row r's BlockQ4_K
  uint64_t sc[8], mn[8];
  uint32_t dd[8];
  for (int r = 0; r < 8; ++r) {
    k4_scales(blocks[r] + 4, sc[r], mn[r]);  // scales follow d and dmin
    std::memcpy(&dd[r], blocks[r], 4);
  }
  K4Meta8 m;
  m.sc_lo =
      _mm256_set_epi64x((long long)sc[3], (long long)sc[2], (long long)sc[1], (long long)sc[0]);
  m.sc_hi =
      _mm256_set_epi64x((long long)sc[7], (long long)sc[6], (long long)sc[5], (long long)sc[4]);
  m.mn_lo =
      _mm256_set_epi64x((long long)mn[3], (long long)mn[2], (long long)mn[1], (long long)mn[0]);
  m.mn_hi =
      _mm256_set_epi64x((long long)mn[7], (long long)mn[6], (long long)mn[5], (long long)mn[4]);
  // (d | dmin << 16) per row -> the 8 d halves, then the 8 dmin halves, converted.
  const __m256i v = _mm256_loadu_si256((const __m256i*)dd);
  const __m256i sep = _mm256_permute4x64_epi64(
      _mm256_shuffle_epi8(
          v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8,
                              9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15)),
      _MM_SHUFFLE(3, 1, 2, 0));
  m.d = _mm256_cvtph_ps(_mm256_castsi256_si128(sep));
  m.dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(sep, 1));
  return m;
}
// From the qwords of 4 rows (two per 128-bit lane), int32 lane k of each 128-bit lane (k = 0, 1:
// the lane's two rows) = bytes b0 and b1 of that row's qword as int16 (b1 < 0: b0 twice).
inline __m256i k4_pick_pairs(__m256i q4, int b0, int b1) {
  const char z = (char)0x80;
  const char l0 = (char)b0, l1 = (char)b1, h0 = (char)(8 + b0), h1 = (char)(8 + b1);
  const __m256i ctl = _mm256_setr_epi8(l0, z, l1, z, h0, z, h1, z, z, z, z, z, z, z, z, z,  //
                                       l0, z, l1, z, h0, z, h1, z, z, z, z, z, z, z, z, z);
  return _mm256_shuffle_epi8(q4, ctl);
}
// 8 rows' int32 pairs (lane r) from the two halves of k4_pick_pairs.
inline __m256i k4_rows8(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_unpacklo_epi64(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
}

// ---- Q4_K with exact block sums (q4k_exact_avx2.cpp, q4k_exact_avx512.cpp) ----------------

// block_step in the 8 lanes of a vector (rows or tokens): lane k takes exactly block_step's two
// roundings with d[k], dmin[k], ad[k], s[k], m[k]. The one float step of every vector path.
inline __m256 lanes_step(__m256 d, __m256 dmin, __m256 ad, __m256i s, __m256i m, __m256 acc) {
  acc = _mm256_fmadd_ps(_mm256_mul_ps(d, ad), _mm256_cvtepi32_ps(s), acc);
  return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, ad), _mm256_cvtepi32_ps(m), acc);
}

// One activation block's quants [off, off + 32).
inline __m256i load_act(const BlockQ8_K& a, int off) {
  return _mm256_loadu_si256((const __m256i*)(a.qs + off));
}

// The sum of v's int32 lanes (exact).
inline int32_t reduce_i32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(x);
}

// The float steps of one block for one row and token. Both files' vector lanes and scalar paths
// do exactly these two roundings (a scalar FMA rounds like one lane of a vector FMA).
inline float block_step(float acc, float d, float dmin, float ad, int32_t s, int32_t m) {
  acc = std::fma(d * ad, (float)s, acc);
  return std::fma(-(dmin * ad), (float)m, acc);
}

// 8 int32 vectors -> one vector whose lane r is the sum of v[r]'s lanes (exact integers).
inline __m256i reduce8_rows(const __m256i* v) {
  __m256i x[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)  // 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    x[k] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                            _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
  const __m256i y0 =
      _mm256_add_epi32(_mm256_unpacklo_epi64(x[0], x[1]), _mm256_unpackhi_epi64(x[0], x[1]));
  const __m256i y1 =
      _mm256_add_epi32(_mm256_unpacklo_epi64(x[2], x[3]), _mm256_unpackhi_epi64(x[2], x[3]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(y0, y1, 0x20),
                          _mm256_permute2x128_si256(y0, y1, 0x31));
}

// A thread's 64-byte aligned buffer for the decode kernels' per-block integer lanes. Not
// core/aligned_buffer.h: its inline members compiled here with AVX-512 flags could be the copy
// the linker keeps for every caller (see nt_dispatch.h).
struct DecodeScratch {
  uint8_t* p = nullptr;
  size_t n = 0;
  DecodeScratch() = default;
  DecodeScratch(const DecodeScratch&) = delete;
  DecodeScratch& operator=(const DecodeScratch&) = delete;
  ~DecodeScratch() { std::free(p); }
  uint8_t* get(size_t bytes) {
    if (n < bytes) {
      std::free(p);
      n = (bytes + 63) / 64 * 64;
      p = static_cast<uint8_t*>(std::aligned_alloc(64, n));
      if (p == nullptr) {
        n = 0;
        throw std::bad_alloc();
      }
    }
    return p;
  }
};

// The float steps of a packed 8-row tile for one token and block (q4k_exact_*.cpp): s holds
// the 8 rows' S, mn the block's packed mins (int32 lane r = row r's mins 2q, 2q+1 as int16, four
// vectors), d8 / dm8 the rows' d and dmin. M comes from the token's bsum pairs (|pair| <= 4096,
// so int16), pairs 2q, 2q+1 broadcast against mn[q].
inline __m256 tile8_step(const BlockQ8_K& at, __m256i s, const __m256i* mn, __m256 d8, __m256 dm8,
                         __m256 acc) {
  const __m256i bp =
      _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)at.bsums), _mm256_set1_epi16(1));
  const __m256i bp16 = _mm256_packs_epi32(bp, bp);  // dwords 0, 1, 4, 5: pairs 0..3
  __m256i m = _mm256_madd_epi16(mn[0], _mm256_permutevar8x32_epi32(bp16, _mm256_set1_epi32(0)));
  m = _mm256_add_epi32(
      m, _mm256_madd_epi16(mn[1], _mm256_permutevar8x32_epi32(bp16, _mm256_set1_epi32(1))));
  m = _mm256_add_epi32(
      m, _mm256_madd_epi16(mn[2], _mm256_permutevar8x32_epi32(bp16, _mm256_set1_epi32(4))));
  m = _mm256_add_epi32(
      m, _mm256_madd_epi16(mn[3], _mm256_permutevar8x32_epi32(bp16, _mm256_set1_epi32(5))));
  return lanes_step(d8, dm8, _mm256_set1_ps(at.d), s, m, acc);
}

// Q4_K decode over a group of 8 rows, one token, for both levels (q4k_exact_*.cpp): every
// block's 8 rows are reduced together and take their float steps in the lanes of one vector, as
// the packed prefill tiles do (fewer instructions per row and block than reducing each row on
// its own, and than the older lane-wise float sums). Rows of at least kMultiRowMinBytes are
// walked interleaved, block by block (the activation loaded once for all 8, a prefetch stream
// per row); shorter rows one after another, each a sequential stream the hardware prefetcher
// follows (8 interleaved streams of 2.3 KiB rows ran ~10% slower), each row's S and M reduced to
// int32 as its block is done and kept, with d and dmin, in a small buffer (128 bytes per block)
// until all 8 rows are done. Keeping the blocks' unreduced lanes there instead (832 bytes per
// block, 5.8x the weights' 144) stalled the weight stream: on a Zen 4 EPYC (2026-11-28,
// `bench_micro BM_matvec/type:12/rows:14336/cols:4096`, cold) 9-11 GB/s on one thread against
// 16 now, 19-20 on two against 26-29, while cache-hot it was 5% faster; Mixtral-shape decode
// 18.7 -> 24.1 tok/s. The exact integer sums make either order give the same bits. L is the
// level: its S-lane vector Sums, the activation block it loads once (Act, load), per-call
// constants (Prep, prep), one row's block (row: S lanes, M lanes, d, dmin), the 8-row reduction
// of S lanes (reduce8) and one row's (reduce1).
template <typename L>
void q4k_exact_rows8(int64_t n, const void* w, size_t stride, const void* act, float* out) {
  constexpr int R = 8;
  constexpr int64_t kPrefetchBlocks = 8;
  using Sums = typename L::Sums;
  const uint8_t* wr = static_cast<const uint8_t*>(w);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / QK_K;
  const typename L::Prep prep = L::prep();
  auto block = [&](int r, int64_t i) -> const BlockQ4_K& {
    return reinterpret_cast<const BlockQ4_K*>(wr + r * stride)[i];
  };
  __m256 acc = _mm256_setzero_ps();
  auto float_step = [&](const Sums* s8, const __m256i* m8, const float* d, const float* dmin,
                        float ad_s) {
    acc = lanes_step(_mm256_loadu_ps(d), _mm256_loadu_ps(dmin), _mm256_set1_ps(ad_s),
                     L::reduce8(s8), reduce8_rows(m8), acc);
  };
  if ((size_t)nb * sizeof(BlockQ4_K) >= kMultiRowMinBytes) {
    for (int64_t i = 0; i < nb; ++i) {
      // Block i + 8 of each row; past a row's end, the same row of the next group of 8.
      const int64_t pi = i + kPrefetchBlocks;
      const size_t poff =
          (size_t)pi * sizeof(BlockQ4_K) + (pi >= nb ? (size_t)(R - 1) * stride : 0);
      Sums s8[R];
      __m256i m8[R];
      float d[R], dmin[R];
      const typename L::Act x = L::load(a[i]);
      const __m256i bs = _mm256_loadu_si256((const __m256i*)a[i].bsums);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const char* p = reinterpret_cast<const char*>(wr + r * stride + poff);
        _mm_prefetch(p, _MM_HINT_T0);
        _mm_prefetch(p + 64, _MM_HINT_T0);
        _mm_prefetch(p + 128, _MM_HINT_T0);
        L::row(prep, block(r, i), x, bs, s8[r], m8[r], d[r], dmin[r]);
      }
      float_step(s8, m8, d, dmin, a[i].d);
    }
  } else {
    thread_local DecodeScratch scratch;
    // Per block, lane r = row r: S and M as int32, then d and dmin (32 bytes each).
    constexpr size_t kS = 0, kM = 32, kD = 64, kDmin = 96, kPerBlock = 128;
    uint8_t* buf = scratch.get((size_t)nb * kPerBlock);
    for (int r = 0; r < R; ++r) {
      for (int64_t i = 0; i < nb; ++i) {
        prefetch_block<sizeof(BlockQ4_K)>(&block(r, i));
        uint8_t* bi = buf + (size_t)i * kPerBlock;
        Sums s;
        __m256i m;
        L::row(prep, block(r, i), L::load(a[i]), _mm256_loadu_si256((const __m256i*)a[i].bsums), s,
               m, reinterpret_cast<float*>(bi + kD)[r], reinterpret_cast<float*>(bi + kDmin)[r]);
        reinterpret_cast<int32_t*>(bi + kS)[r] = L::reduce1(s);
        reinterpret_cast<int32_t*>(bi + kM)[r] = reduce_i32(m);
      }
    }
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* bi = buf + (size_t)i * kPerBlock;
      acc = lanes_step(_mm256_load_ps(reinterpret_cast<const float*>(bi + kD)),
                       _mm256_load_ps(reinterpret_cast<const float*>(bi + kDmin)),
                       _mm256_set1_ps(a[i].d), _mm256_load_si256((const __m256i*)(bi + kS)),
                       _mm256_load_si256((const __m256i*)(bi + kM)), acc);
    }
  }
  _mm256_storeu_ps(out, acc);
}

// Q3_K's 16 6-bit scales (4 low bits + 2 high bits each), as int16 minus 32.
inline __m256i q3k_scales(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t hi = u[2];
  const __m128i v = _mm_setr_epi32((int)((u[0] & 0x0f0f0f0f) | ((hi << 4) & 0x30303030)),
                                   (int)((u[1] & 0x0f0f0f0f) | ((hi << 2) & 0x30303030)),
                                   (int)(((u[0] >> 4) & 0x0f0f0f0f) | (hi & 0x30303030)),
                                   (int)(((u[1] >> 4) & 0x0f0f0f0f) | ((hi >> 2) & 0x30303030)));
  return _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32));
}

}  // namespace
}  // namespace moeflow::kernels::avx2
