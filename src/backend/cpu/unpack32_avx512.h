#pragma once
// 32-element weight blocks in AVX-512 ops, two blocks per zmm (block b0 in the low half), and the
// Q8_0 activation row as the 32-block kernels read it: shared by vec_dot_avx512.cpp's kernels
// and q5_0_avx512.cpp's. Internal linkage: see nt_dispatch.h.
#include "backend/cpu/simd_intrinsics.h"

#include "backend/cpu/nt_dispatch.h"
#include "backend/cpu/unpack32_avx2.h"
#include "quant/blocks.h"

#include <array>
#include <cstring>
#include <type_traits>

namespace moeflow::kernels::avx512 {
namespace {

using avx2::unpack;

// Weight bytes of two blocks in element order (block b0 in bytes 0..31), signed.
template <typename B>
inline __m512i unpack_pair_s(const B& b0, const B& b1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(unpack(b0)), unpack(b1), 1);
}
// -128 x the sum of every four of w's signed bytes: the start value that cancels the +128 of
// the unsigned activation bytes.
inline __m512i offset_start(__m512i w) {
  return _mm512_sub_epi32(
      _mm512_setzero_si512(),
      _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w));
}
inline __m256i offset_start(__m256i w) {
  return _mm256_sub_epi32(
      _mm256_setzero_si256(),
      _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), w));
}
// Q4_0 / Q5_0 in AVX-512 ops: the two blocks' 16 nibble bytes go to 128-bit lanes [b0 b0 b1 b1]
// (the odd lanes shifted for the high nibbles), Q5_0's 2 x 32 fifth bits become a mask register,
// and the offset is added per byte: q = nibble + 16 * bit - 16 (Q5_0), nibble - 8 (Q4_0); ~7
// vector instructions for the pair instead of ~18 with the AVX2 unpacking.
template <typename B>
inline __m512i nibble_pair(const B& b0, const B& b1) {
  const __m256i both = _mm256_set_m128i(_mm_loadu_si128((const __m128i*)b1.qs),
                                        _mm_loadu_si128((const __m128i*)b0.qs));
  const __m512i v =
      _mm512_shuffle_i64x2(_mm512_castsi256_si512(both), _mm512_castsi256_si512(both), 0x50);
  return _mm512_and_si512(_mm512_mask_srli_epi64(v, 0xCC, v, 4), _mm512_set1_epi8(0x0F));
}
template <>
inline __m512i unpack_pair_s(const BlockQ4_0& b0, const BlockQ4_0& b1) {
  return _mm512_sub_epi8(nibble_pair(b0, b1), _mm512_set1_epi8(8));
}
template <>
inline __m512i unpack_pair_s(const BlockQ5_0& b0, const BlockQ5_0& b1) {
  uint32_t h0, h1;
  std::memcpy(&h0, b0.qh, 4);
  std::memcpy(&h1, b1.qh, 4);
  const __mmask64 fifth = _cvtu64_mask64((uint64_t)h1 << 32 | h0);
  const __m512i off = _mm512_mask_blend_epi8(fifth, _mm512_set1_epi8(-16), _mm512_setzero_si512());
  return _mm512_add_epi8(nibble_pair(b0, b1), off);
}

// IQ4_NL / MXFP4: the pair's nibbles as for Q4_0, then one 512-bit table lookup: ~5 vector
// instructions for the pair instead of two AVX2 lookups and an insert. The same bytes.
template <typename B>
inline __m512i lookup_pair_s(const B& b0, const B& b1, const int8_t* table) {
  const __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)table));
  return _mm512_shuffle_epi8(t, nibble_pair(b0, b1));
}
template <>
inline __m512i unpack_pair_s(const BlockIQ4_NL& b0, const BlockIQ4_NL& b1) {
  return lookup_pair_s(b0, b1, kIq4nlValues);
}
template <>
inline __m512i unpack_pair_s(const BlockMXFP4& b0, const BlockMXFP4& b1) {
  return lookup_pair_s(b0, b1, kMxfp4Values);
}

// Token t's activation: its blocks' float scales (once, and x8) and the quants back to back as
// unsigned bytes (the blocks themselves are not read).
template <int NT>
struct Act32 {
  const float* da[NT];
  const uint8_t* qs[NT];
  const float* da8[NT];
};

template <int NT>
inline Act32<NT> act32(const void* act, size_t stride, int64_t n) {
  Act32<NT> x;
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const void* row = act_row<uint8_t>(act, stride, t);
    x.da[t] = q8_0_row_scales(row, n);
    x.qs[t] = q8_0_row_quants_u8(row, n);
    x.da8[t] = q8_0_row_scales8(row, n);
  }
  return x;
}

// e8m0_half of all 256 bytes, made at compile time (constexpr: no start-up code, which in this
// file, built for AVX-512, could run on a machine without it), for MXFP4's scale broadcasts.
constexpr std::array<float, 256> kE8m0Half = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[e] = e8m0_half((uint8_t)e);
  return t;
}();

// [scale of b0 x 8 | scale of b1 x 8]. For fp16 scales both are converted by one vcvtph2ps
// and spread by one permute (the same values as two scalar conversions and broadcasts).
template <typename B>
inline __m512 scale_pair(const B& b0, const B& b1) {
  if constexpr (std::is_same_v<B, BlockMXFP4>) {
    // Two broadcasts from memory (load ports) rather than two scalar conversions moved into
    // vector registers on the shuffle port the unpacking needs too.
    return _mm512_insertf32x8(_mm512_set1_ps(kE8m0Half[b0.e]),
                              _mm256_broadcast_ss(&kE8m0Half[b1.e]), 1);
  } else {
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)b1.d << 16 | b0.d)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(d));
  }
}

}  // namespace
}  // namespace moeflow::kernels::avx512
