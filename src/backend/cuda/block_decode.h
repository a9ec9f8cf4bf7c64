#pragma once
// The per-block arithmetic of the CUDA kernels, written once for the host and the device
// (MOEFLOW_HD = __host__ __device__ under nvcc, nothing under a host compiler), so that
// tests/backend/test_block_decode.cpp checks on any machine, element for element, exactly
// what the GPU computes: the decoding of every weight block format, the 8-bit activation
// quantizer and the integer chunk dot product.
//
// Unit of work: a chunk of 32 consecutive elements of a weight row. Blocks of 32 are one
// chunk; K-quant / IQ4_XS super-blocks of 256 are 8 chunks. A chunk decodes to 32 small
// integers q (packed four to an int32, little-endian bytes, two's complement) and, per half
// of 16 elements, a scale d[h] and a subtracted minimum m[h]:
//     value(i) = d[i / 16] * q[i] - m[i / 16]
// computed in float exactly as quant/quant.h's dequantize_row computes it (same products,
// same order), so decoded values are the reference's bits.
//
// Activations (ActQ8): float x of a chunk -> d = amax / 127 (float, not fp16 as in ggml's
// block_q8_1), q = round(x / d) in [-127, 127]. The activation block sums that ggml stores are
// computed exactly in the dot instead (integer dp4a against 0x01010101), which is what the
// minimum terms of Q4_1/Q5_1/Q2_K/Q4_K/Q5_K need.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/ggml_type.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#if defined(__CUDACC__)
#define MOEFLOW_HD __host__ __device__ __forceinline__
#else
#define MOEFLOW_HD inline
#endif

namespace moeflow::cuda {

struct Chunk32 {
  int32_t q[8];  // 32 int8 values, element 4*i + b in byte b of q[i]
  float d[2];    // scale of elements 0..15 and 16..31
  float m[2];    // subtracted minimum of each half (0 for symmetric formats)
};

// ---- loads: the alignment each format guarantees (rows of whole blocks, buffers 256-aligned)

MOEFLOW_HD uint32_t ld_u8x4(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
MOEFLOW_HD uint32_t ld_u16x2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
#else
  return ld_u8x4(p);
#endif
}
MOEFLOW_HD uint32_t ld_u32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
MOEFLOW_HD uint16_t ld_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  return (uint16_t)(p[0] | (p[1] << 8));
#endif
}

// ---- scalar conversions (bit-exact, as core/fp16.h)

MOEFLOW_HD float bits_to_f32(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

MOEFLOW_HD float f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    exp = 127 - 15 + 1;  // subnormal: renormalise
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    return bits_to_f32(sign | (exp << 23) | ((mant & 0x3ff) << 13));
  }
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
  return bits_to_f32(sign | ((exp + 127 - 15) << 23) | (mant << 13));
#endif
}

MOEFLOW_HD float bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

// E8M0 exponent of MXFP4, halved: the code book below holds the E2M1 values doubled.
MOEFLOW_HD float e8m0_half(uint8_t e) {
  return bits_to_f32(e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e);
}

// ---- byte-wise helpers on packed int8x4

// Byte-wise b - k (bytes b <= 127, k <= 128): setting bit 7 of every byte first keeps the
// subtraction from borrowing across bytes; flipping it back gives two's complement.
MOEFLOW_HD int32_t sub_bytes(uint32_t x, uint32_t k4) {
  return (int32_t)(((x | 0x80808080u) - k4) ^ 0x80808080u);
}

// Bits 0..3 of v to bit 4 of bytes 0..3 (the fifth bit of Q5 quants).
MOEFLOW_HD uint32_t spread4_to_bit4(uint32_t v) {
  return ((v & 1u) << 4) | ((v & 2u) << 11) | ((v & 4u) << 18) | ((v & 8u) << 25);
}

// Code books of the non-uniform 4-bit formats, packed 8 bytes to a word so that a lookup is a
// shift in registers on the device (no table in memory).
MOEFLOW_HD int32_t iq4nl_value(uint32_t i) {
  // -127 -104 -83 -65 -49 -35 -22 -10 | 1 13 25 38 53 69 89 113
  const uint64_t lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
  return (int32_t)(int8_t)((i < 8 ? lo >> (8 * i) : hi >> (8 * (i - 8))) & 0xff);
}
MOEFLOW_HD int32_t mxfp4_value(uint32_t i) {
  // 0 1 2 3 4 6 8 12 | 0 -1 -2 -3 -4 -6 -8 -12 (E2M1 doubled)
  const uint64_t lo = 0x0C08060403020100ull, hi = 0xF4F8FAFCFDFEFF00ull;
  return (int32_t)(int8_t)((i < 8 ? lo >> (8 * i) : hi >> (8 * (i - 8))) & 0xff);
}

// Four nibbles (one per byte of x, low 4 bits) through a code book, packed back.
template <int32_t (*Book)(uint32_t)>
MOEFLOW_HD int32_t lookup4(uint32_t x) {
  return (int32_t)(((uint32_t)Book(x & 15) & 0xff) | (((uint32_t)Book((x >> 8) & 15) & 0xff) << 8) |
                   (((uint32_t)Book((x >> 16) & 15) & 0xff) << 16) |
                   (((uint32_t)Book((x >> 24) & 15) & 0xff) << 24));
}

MOEFLOW_HD void set_scale(Chunk32& c, float d, float m) {
  c.d[0] = c.d[1] = d;
  c.m[0] = c.m[1] = m;
}

// ---- per-format chunk decoders: decode<T>(block, u) for chunk u of the block

template <GgmlType T>
struct Format;

// 32-element blocks: one chunk, elements 0..15 in the low nibbles of qs[0..15], 16..31 in the
// high nibbles.
template <>
struct Format<GgmlType::Q4_0> {
  static constexpr int kBytes = 18, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u16x2(b + 2 + 4 * i);
      c.q[i] = sub_bytes(w & 0x0F0F0F0Fu, 0x08080808u);
      c.q[4 + i] = sub_bytes((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
    set_scale(c, f16_to_f32(ld_u16(b)), 0.0f);
  }
};

template <>
struct Format<GgmlType::Q4_1> {
  static constexpr int kBytes = 20, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u32(b + 4 + 4 * i);
      c.q[i] = (int32_t)(w & 0x0F0F0F0Fu);
      c.q[4 + i] = (int32_t)((w >> 4) & 0x0F0F0F0Fu);
    }
    set_scale(c, f16_to_f32(ld_u16(b)), -f16_to_f32(ld_u16(b + 2)));
  }
};

template <>
struct Format<GgmlType::Q5_0> {
  static constexpr int kBytes = 22, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    const uint32_t qh = ld_u16x2(b + 2);
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u16x2(b + 6 + 4 * i);
      c.q[i] = sub_bytes((w & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 15), 0x10101010u);
      c.q[4 + i] = sub_bytes(((w >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * i)) & 15),
                             0x10101010u);
    }
    set_scale(c, f16_to_f32(ld_u16(b)), 0.0f);
  }
};

template <>
struct Format<GgmlType::Q5_1> {
  static constexpr int kBytes = 24, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    const uint32_t qh = ld_u32(b + 4);
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u32(b + 8 + 4 * i);
      c.q[i] = (int32_t)((w & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 15));
      c.q[4 + i] = (int32_t)(((w >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * i)) & 15));
    }
    set_scale(c, f16_to_f32(ld_u16(b)), -f16_to_f32(ld_u16(b + 2)));
  }
};

template <>
struct Format<GgmlType::Q8_0> {
  static constexpr int kBytes = 34, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    for (int i = 0; i < 8; ++i) c.q[i] = (int32_t)ld_u16x2(b + 2 + 4 * i);
    set_scale(c, f16_to_f32(ld_u16(b)), 0.0f);
  }
};

template <>
struct Format<GgmlType::IQ4_NL> {
  static constexpr int kBytes = 18, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u16x2(b + 2 + 4 * i);
      c.q[i] = lookup4<iq4nl_value>(w);
      c.q[4 + i] = lookup4<iq4nl_value>(w >> 4);
    }
    set_scale(c, f16_to_f32(ld_u16(b)), 0.0f);
  }
};

template <>
struct Format<GgmlType::MXFP4> {
  static constexpr int kBytes = 17, kChunks = 1;
  MOEFLOW_HD static void decode(const uint8_t* b, int, Chunk32& c) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u8x4(b + 1 + 4 * i);
      c.q[i] = lookup4<mxfp4_value>(w);
      c.q[4 + i] = lookup4<mxfp4_value>(w >> 4);
    }
    set_scale(c, e8m0_half(b[0]), 0.0f);
  }
};

// 256-element super-blocks: chunk u is elements 32u..32u+31.

// Q2_K: element j is bits 2*plane of qs[32*half + l] (half = j/128, plane = (j%128)/32,
// l = j%32); scales[g] holds the 4-bit scale (low) and min (high) of elements 16g..16g+15.
template <>
struct Format<GgmlType::Q2_K> {
  static constexpr int kBytes = 84, kChunks = 8;
  MOEFLOW_HD static void decode(const uint8_t* b, int u, Chunk32& c) {
    const int half = u / 4, shift = 2 * (u % 4);
    for (int i = 0; i < 8; ++i)
      c.q[i] = (int32_t)((ld_u32(b + 16 + 32 * half + 4 * i) >> shift) & 0x03030303u);
    const float d = f16_to_f32(ld_u16(b + 80)), dmin = f16_to_f32(ld_u16(b + 82));
    for (int h = 0; h < 2; ++h) {
      const uint8_t s = b[2 * u + h];
      c.d[h] = d * (float)(s & 0x0f);
      c.m[h] = dmin * (float)(s >> 4);
    }
  }
};

// Q3_K: low 2 bits as Q2_K, the third bit in hmask[l] bit (4*half + plane), value - 4 when
// that bit is clear; 16 signed 6-bit scales (quant/k_scales.h q3k_get_scale).
template <>
struct Format<GgmlType::Q3_K> {
  static constexpr int kBytes = 110, kChunks = 8;
  MOEFLOW_HD static int scale(const uint8_t* s, int j) {
    const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
  }
  MOEFLOW_HD static void decode(const uint8_t* b, int u, Chunk32& c) {
    const int half = u / 4, plane = u % 4;
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld_u16x2(b + 32 + 32 * half + 4 * i) >> (2 * plane)) & 0x03030303u;
      const uint32_t hb = (ld_u16x2(b + 4 * i) >> (4 * half + plane)) & 0x01010101u;
      c.q[i] = sub_bytes(lo | (hb << 2), 0x04040404u);
    }
    const float d = f16_to_f32(ld_u16(b + 108));
    for (int h = 0; h < 2; ++h) {
      c.d[h] = d * (float)scale(b + 96, 2 * u + h);
      c.m[h] = 0.0f;
    }
  }
};

// Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and min each (quant/k_scales.h);
// sub-block u is the low (u even) or high (u odd) nibbles of qs[32*(u/2) ..].
MOEFLOW_HD void k4_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <>
struct Format<GgmlType::Q4_K> {
  static constexpr int kBytes = 144, kChunks = 8;
  MOEFLOW_HD static void decode(const uint8_t* b, int u, Chunk32& c) {
    const int shift = 4 * (u & 1);
    for (int i = 0; i < 8; ++i)
      c.q[i] = (int32_t)((ld_u32(b + 16 + 32 * (u / 2) + 4 * i) >> shift) & 0x0F0F0F0Fu);
    int sc, m;
    k4_scale_min(b + 4, u, sc, m);
    set_scale(c, f16_to_f32(ld_u16(b)) * (float)sc, f16_to_f32(ld_u16(b + 2)) * (float)m);
  }
};

template <>
struct Format<GgmlType::Q5_K> {
  static constexpr int kBytes = 176, kChunks = 8;
  MOEFLOW_HD static void decode(const uint8_t* b, int u, Chunk32& c) {
    const int shift = 4 * (u & 1);
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld_u32(b + 48 + 32 * (u / 2) + 4 * i) >> shift) & 0x0F0F0F0Fu;
      const uint32_t hb = (ld_u32(b + 16 + 4 * i) >> u) & 0x01010101u;
      c.q[i] = (int32_t)(lo | (hb << 4));
    }
    int sc, m;
    k4_scale_min(b + 4, u, sc, m);
    set_scale(c, f16_to_f32(ld_u16(b)) * (float)sc, f16_to_f32(ld_u16(b + 2)) * (float)m);
  }
};

// Q6_K: with half = u/4, quarter = u%4: low nibble of ql[64*half + 32*(quarter&1) + l] (high
// nibble when quarter >= 2), top 2 bits in qh[32*half + l] bits 2*quarter; codes offset by 32;
// signed 8-bit scale per 16.
template <>
struct Format<GgmlType::Q6_K> {
  static constexpr int kBytes = 210, kChunks = 8;
  MOEFLOW_HD static void decode(const uint8_t* b, int u, Chunk32& c) {
    const int half = u / 4, quarter = u % 4;
    const int lshift = 4 * (quarter >> 1), hshift = 2 * quarter;
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo =
          (ld_u16x2(b + 64 * half + 32 * (quarter & 1) + 4 * i) >> lshift) & 0x0F0F0F0Fu;
      const uint32_t hi = (ld_u16x2(b + 128 + 32 * half + 4 * i) >> hshift) & 0x03030303u;
      c.q[i] = sub_bytes(lo | (hi << 4), 0x20202020u);
    }
    const float d = f16_to_f32(ld_u16(b + 208));
    for (int h = 0; h < 2; ++h) {
      c.d[h] = d * (float)(int8_t)b[192 + 2 * u + h];
      c.m[h] = 0.0f;
    }
  }
};

// IQ4_XS: sub-block u has 16 bytes of nibbles (low: elements 0..15, high: 16..31) and a 6-bit
// scale (4 low bits in scales_l, 2 high bits in scales_h) minus 32.
template <>
struct Format<GgmlType::IQ4_XS> {
  static constexpr int kBytes = 136, kChunks = 8;
  MOEFLOW_HD static void decode(const uint8_t* b, int u, Chunk32& c) {
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld_u32(b + 8 + 16 * u + 4 * i);
      c.q[i] = lookup4<iq4nl_value>(w);
      c.q[4 + i] = lookup4<iq4nl_value>(w >> 4);
    }
    const uint32_t sh = ld_u16(b + 2);
    const int ls = ((b[4 + u / 2] >> (4 * (u % 2))) & 0x0f) | (int)(((sh >> (2 * u)) & 3) << 4);
    set_scale(c, f16_to_f32(ld_u16(b)) * (float)(ls - 32), 0.0f);
  }
};

// Byte i of a decoded chunk as an int (element i).
MOEFLOW_HD int chunk_q(const Chunk32& c, int i) {
  return (int)(int8_t)(((uint32_t)c.q[i / 4] >> (8 * (i % 4))) & 0xff);
}
// Element i of a decoded chunk, as quant/quant.h dequantizes it.
MOEFLOW_HD float chunk_value(const Chunk32& c, int i) {
  return c.d[i / 16] * (float)chunk_q(c, i) - c.m[i / 16];
}

// ---- activations

// Quantizes 32 floats: q = round(x / d), d = amax / 127 (0 when all are zero).
MOEFLOW_HD float quantize_chunk(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < 32; ++i) {
    q[i] = (int8_t)roundf(x[i] * id);  // half away from zero, as ggml's quantizers
  }
  return d;
}

// Four int8 products summed into c (the dp4a instruction on the device).
MOEFLOW_HD int dp4a(int32_t a, int32_t b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += (int)(int8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)((uint32_t)b >> (8 * i));
  return c;
#endif
}

// Dot of a decoded weight chunk with one activation chunk (32 int8 as 8 packed words, scale
// da): da * (d0*S0 + d1*S1 - m0*A0 - m1*A1), with S_h = sum q_w*q_a and A_h = sum q_a over
// half h in exact integers.
MOEFLOW_HD float chunk_dot(const Chunk32& c, const int32_t* a, float da) {
  int s0 = 0, s1 = 0;
  for (int i = 0; i < 4; ++i) s0 = dp4a(c.q[i], a[i], s0);
  for (int i = 4; i < 8; ++i) s1 = dp4a(c.q[i], a[i], s1);
  float r = c.d[0] * (float)s0 + c.d[1] * (float)s1;
  if (c.m[0] != 0.0f || c.m[1] != 0.0f) {
    int a0 = 0, a1 = 0;
    for (int i = 0; i < 4; ++i) a0 = dp4a(0x01010101, a[i], a0);
    for (int i = 4; i < 8; ++i) a1 = dp4a(0x01010101, a[i], a1);
    r -= c.m[0] * (float)a0 + c.m[1] * (float)a1;
  }
  return da * r;
}

// ---- dispatch by run-time type (host tests, and the launchers' switch)

// Calls f(Format<T>{}) for a block-quantized weight type; returns false for other types.
template <typename F>
bool with_format(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0: f(Format<GgmlType::Q4_0>{}); return true;
    case GgmlType::Q4_1: f(Format<GgmlType::Q4_1>{}); return true;
    case GgmlType::Q5_0: f(Format<GgmlType::Q5_0>{}); return true;
    case GgmlType::Q5_1: f(Format<GgmlType::Q5_1>{}); return true;
    case GgmlType::Q8_0: f(Format<GgmlType::Q8_0>{}); return true;
    case GgmlType::IQ4_NL: f(Format<GgmlType::IQ4_NL>{}); return true;
    case GgmlType::MXFP4: f(Format<GgmlType::MXFP4>{}); return true;
    case GgmlType::Q2_K: f(Format<GgmlType::Q2_K>{}); return true;
    case GgmlType::Q3_K: f(Format<GgmlType::Q3_K>{}); return true;
    case GgmlType::Q4_K: f(Format<GgmlType::Q4_K>{}); return true;
    case GgmlType::Q5_K: f(Format<GgmlType::Q5_K>{}); return true;
    case GgmlType::Q6_K: f(Format<GgmlType::Q6_K>{}); return true;
    case GgmlType::IQ4_XS: f(Format<GgmlType::IQ4_XS>{}); return true;
    default: return false;
  }
}

// Element i of a float weight row (F32, F16, BF16).
MOEFLOW_HD float float_weight(GgmlType t, const uint8_t* row, int64_t i) {
  if (t == GgmlType::F32) return bits_to_f32(ld_u32(row + 4 * i));
  const uint16_t h = ld_u16(row + 2 * i);
  return t == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace moeflow::cuda
