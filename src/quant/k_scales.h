#pragma once
// Packing of the 6-bit sub-block scales of the K-quant formats, shared by the quantizers, the
// dequantizers and (if they like) the SIMD kernels.
#include <cstdint>

namespace moeflow {

// Q4_K / Q5_K: 8 (scale, min) pairs of 6 bits in 12 bytes. Bytes 0..3 hold scales 0..3 in their
// low 6 bits, bytes 4..7 mins 0..3; pairs 4..7 keep their low 4 bits in bytes 8..11 (scale low
// nibble, min high nibble) and their top 2 bits in the spare top bits of bytes 0..7.
inline void k4_get_scale_min(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}
inline void k4_pack_scales_mins(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
}

// Q3_K: 16 unsigned 6-bit values (scale + 32) in 12 bytes. Low nibbles: value j < 8 in the low
// nibble of byte j, value j >= 8 in the high nibble of byte j - 8. Top 2 bits: byte 8 + j % 4,
// bit pair j / 4.
inline int q3k_get_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (lo | (hi << 4)) - 32;
}
inline void q3k_pack_scales(const uint8_t v[16], uint8_t s[12]) {
  for (int i = 0; i < 12; ++i) s[i] = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = v[j] & 0x0f, hi = (v[j] >> 4) & 3;
    if (j < 8)
      s[j] |= lo;
    else
      s[j - 8] |= (uint8_t)(lo << 4);
    s[8 + (j & 3)] |= (uint8_t)(hi << (2 * (j >> 2)));
  }
}

}  // namespace moeflow
