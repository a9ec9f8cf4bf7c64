#pragma once
// Q4_K / Q5_K helpers shared by the AVX-512 kernels (vec_dot_avx512.cpp, q4k_exact_avx512.cpp).
// Internal linkage: see nt_dispatch.h.
#include <cstring>

#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels::avx512 {
namespace {

inline __m512i load_act64(const BlockQ8_K& a, int off) {
  return _mm512_loadu_si512((const void*)(a.qs + off));
}

// int16 lanes 0..15 = v[lo], lanes 16..31 = v[hi] (v = 8 or 16 int16 in the low lanes).
inline __m512i idx_pair(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((int16_t)lo)),
                            _mm256_set1_epi16((int16_t)hi), 1);
}
// int16 lanes 8k..8k+7 = v[first + k], k = 0..3 (four 16-element groups per zmm).
inline __m512i idx_quad(int first) {
  return _mm512_set_epi64(
      (int64_t)(first + 3) * 0x0001000100010001LL, (int64_t)(first + 3) * 0x0001000100010001LL,
      (int64_t)(first + 2) * 0x0001000100010001LL, (int64_t)(first + 2) * 0x0001000100010001LL,
      (int64_t)(first + 1) * 0x0001000100010001LL, (int64_t)(first + 1) * 0x0001000100010001LL,
      (int64_t)first * 0x0001000100010001LL, (int64_t)first * 0x0001000100010001LL);
}

// k4_scales in one xmm: bytes 0..7 the 8 scales, 8..15 the 8 mins (the same values as the scalar
// unpacking, in ~9 vector instructions instead of ~14 scalar ones plus two GPR -> xmm moves). The
// 16-byte load reads 4 bytes past the scales, which are the next field of the same block.
inline __m128i k4_scales_x(const uint8_t* s) {
  const __m128i v = _mm_loadu_si128((const __m128i*)s);
  const __m128i lo = _mm_and_si128(v, _mm_set_epi32(0, 0, 0x3f3f3f3f, 0x3f3f3f3f));
  const __m128i u2 = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xAA), _mm_set_epi32(0, 0, 4, 0));
  const __m128i hi = _mm_or_si128(_mm_and_si128(u2, _mm_set1_epi32(0x0f0f0f0f)),
                                  _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi32(0x30303030)));
  return _mm_unpacklo_epi32(lo, hi);
}
// The scales as int16 in lanes 0..7 of a zmm (for vpermw).
inline __m512i k4_sc16(__m128i x) { return _mm512_castsi128_si512(_mm_cvtepu8_epi16(x)); }
// Each min twice, as int16: against the 16 bsums (what mins16 gives from the scalar mins).
inline __m256i k4_mn16(__m128i x) { return _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(x, x)); }
// (d, dmin) of a Q4_K / Q5_K block as floats in lanes 0 and 1: one fp16 conversion for both.
// Multiplied by a broadcast activation scale they are the scalar products d * ad, dmin * ad.
inline __m128 k4_d_dmin(const void* block) {
  int32_t h;
  std::memcpy(&h, block, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(h));
}

}  // namespace
}  // namespace moeflow::kernels::avx512
