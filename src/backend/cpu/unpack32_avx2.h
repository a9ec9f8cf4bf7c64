#pragma once
// Unpacking of 32-element weight blocks to signed bytes in element order (AVX2), shared by the
// AVX2 and AVX-512 kernels. Internal linkage: see nt_dispatch.h.
#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/simd_avx2_util.h"
#include "quant/blocks.h"

namespace moeflow::kernels::avx2 {
namespace {

// Signed weight bytes of one 32-block, in element order.
inline __m256i unpack(const BlockQ8_0& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128((const __m128i*)qs);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}
inline __m256i unpack(const BlockQ4_0& b) {
  return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8));
}
inline __m256i unpack(const BlockQ5_0& b) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  // 5-bit value minus 16: keep the nibble where the high bit is set, else subtract 16.
  const __m256i missing = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
  return _mm256_sub_epi8(nibbles(b.qs), missing);
}
inline __m256i lookup16(const int8_t* table, const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128((const __m128i*)table);
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles(qs));
}
inline __m256i unpack(const BlockIQ4_NL& b) { return lookup16(kIq4nlValues, b.qs); }
inline __m256i unpack(const BlockMXFP4& b) { return lookup16(kMxfp4Values, b.qs); }
inline float scale(const BlockQ8_0& b) { return fp16(b.d); }
inline float scale(const BlockQ4_0& b) { return fp16(b.d); }
inline float scale(const BlockQ5_0& b) { return fp16(b.d); }
inline float scale(const BlockIQ4_NL& b) { return fp16(b.d); }
inline float scale(const BlockMXFP4& b) { return e8m0_half(b.e); }

}  // namespace
}  // namespace moeflow::kernels::avx2
