#pragma once
// K-quant scale unpacking shared by the AVX2 and AVX-512 kernels. Internal linkage: see
// nt_dispatch.h.
#include "backend/cpu/simd_avx2_util.h"

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
