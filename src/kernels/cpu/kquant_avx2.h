#pragma once
// K-quant scale unpacking shared by the AVX2 and AVX-512 kernels. Internal linkage: see
// nt_dispatch.h.
#include "kernels/cpu/simd_avx2_util.h"

namespace moeflow::kernels::avx2 {
namespace {

// Q4_K / Q5_K 6-bit scales and mins as bytes: sc[0..7] then m[0..7].
inline void k4_scales(const uint8_t* s, uint8_t* scb, uint8_t* mnb) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3f, m_lo = u[1] & 0x3f3f3f3f;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0f) | ((u[0] >> 2) & 0x30303030);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0f) | ((u[1] >> 2) & 0x30303030);
  std::memcpy(scb, &sc_lo, 4);
  std::memcpy(scb + 4, &sc_hi, 4);
  std::memcpy(mnb, &m_lo, 4);
  std::memcpy(mnb + 4, &m_hi, 4);
}

// Each of the 8 mins applies to two 16-element bsums.
inline __m256i mins16(const uint8_t* mnb) {
  uint64_t m;
  std::memcpy(&m, mnb, 8);
  const __m128i v = _mm_cvtsi64_si128((long long)m);
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

}  // namespace
}  // namespace moeflow::kernels::avx2
