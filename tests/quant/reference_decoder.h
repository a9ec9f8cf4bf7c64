#pragma once
// An independent float64 decoder for every block format, written from the format descriptions
// (GGUF / ggml docs, OCP MX spec) and deliberately structured differently from src/quant: it
// walks the stored bytes and scatters each bit field to the elements it belongs to, instead of
// computing each element's bit position. Values come back as double together with the magnitude
// of the terms that formed them (for a float-rounding tolerance).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/ggml_type.h"

namespace moeflow::testref {

struct RefValue {
  double v = 0;
  double mag = 0;  // sum of |terms|; float evaluation may differ from v by a few ulps of this
};

inline double half_to_double(const uint8_t* p) {
  const unsigned h = (unsigned)p[0] | ((unsigned)p[1] << 8);
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 31;
  const int m = h & 1023;
  if (e == 0) return sign * std::ldexp((double)m, -24);  // subnormal: m * 2^-14 / 1024
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024.0 + m, e - 25);  // (1 + m/1024) * 2^(e-15)
}

inline int bits_of(const uint8_t* p, int byte, int shift, int nbits) {
  return (p[byte] >> shift) & ((1 << nbits) - 1);
}

// Decodes one block of type t at p into out (block_size values).
inline void decode_block(GgmlType t, const uint8_t* p, std::vector<RefValue>& out) {
  static const int iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113};
  auto scaled = [](double d, double q) { return RefValue{d * q, std::fabs(d * q)}; };
  auto affine = [](double d, double q, double m) {  // d*q - m
    return RefValue{d * q - m, std::fabs(d * q) + std::fabs(m)};
  };
  switch (t) {
    case GgmlType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      out.assign(1, {f, std::fabs(f)});
      break;
    }
    case GgmlType::F16: out.assign(1, scaled(half_to_double(p), 1)); break;
    case GgmlType::BF16: {
      const uint32_t bits = ((uint32_t)p[0] << 16) | ((uint32_t)p[1] << 24);
      float f;
      std::memcpy(&f, &bits, 4);
      out.assign(1, {f, std::fabs(f)});
      break;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::IQ4_NL: {
      out.assign(32, {});
      const double d = half_to_double(p);
      const bool has_min = t == GgmlType::Q4_1;
      const double m = has_min ? half_to_double(p + 2) : 0;
      const uint8_t* qs = p + (has_min ? 4 : 2);
      for (int byte = 0; byte < 16; ++byte)
        for (int half = 0; half < 2; ++half) {
          const int q = bits_of(qs, byte, 4 * half, 4);
          RefValue& r = out[byte + 16 * half];
          if (t == GgmlType::Q4_0)
            r = scaled(d, q - 8);
          else if (t == GgmlType::IQ4_NL)
            r = scaled(d, iq4[q]);
          else
            r = affine(d, q, -m);
        }
      break;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      out.assign(32, {});
      const bool has_min = t == GgmlType::Q5_1;
      const double d = half_to_double(p);
      const double m = has_min ? half_to_double(p + 2) : 0;
      const uint8_t* qh = p + (has_min ? 4 : 2);
      const uint8_t* qs = qh + 4;
      int q[32];
      for (int byte = 0; byte < 16; ++byte) {
        q[byte] = bits_of(qs, byte, 0, 4);
        q[byte + 16] = bits_of(qs, byte, 4, 4);
      }
      for (int bit = 0; bit < 32; ++bit) q[bit] += 16 * bits_of(qh, bit / 8, bit % 8, 1);
      for (int e = 0; e < 32; ++e) out[e] = has_min ? affine(d, q[e], -m) : scaled(d, q[e] - 16);
      break;
    }
    case GgmlType::Q8_0: {
      out.assign(32, {});
      const double d = half_to_double(p);
      for (int e = 0; e < 32; ++e) out[e] = scaled(d, (int8_t)p[2 + e]);
      break;
    }
    case GgmlType::Q8_K: {
      out.assign(256, {});
      float d;
      std::memcpy(&d, p, 4);
      for (int e = 0; e < 256; ++e) out[e] = scaled(d, (int8_t)p[4 + e]);
      break;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      // Both share the 2-bit plane: byte b of qs feeds elements 128*(b/32) + 32*k + b%32.
      out.assign(256, {});
      const bool q3 = t == GgmlType::Q3_K;
      const uint8_t* qs = p + (q3 ? 32 : 16);
      int q[256];
      for (int b = 0; b < 64; ++b)
        for (int k = 0; k < 4; ++k) q[128 * (b / 32) + 32 * k + b % 32] = bits_of(qs, b, 2 * k, 2);
      if (!q3) {
        const double d = half_to_double(p + 80), dmin = half_to_double(p + 82);
        for (int e = 0; e < 256; ++e) {
          const int sb = e / 16;
          out[e] = affine(d * bits_of(p, sb, 0, 4), q[e], dmin * bits_of(p, sb, 4, 4));
        }
      } else {
        // hmask: byte l bit k belongs to element 32*k + l; a clear bit subtracts 4.
        for (int l = 0; l < 32; ++l)
          for (int k = 0; k < 8; ++k)
            if (!bits_of(p, l, k, 1)) q[32 * k + l] -= 4;
        const uint8_t* sc = p + 96;
        int s[16] = {0};
        for (int b = 0; b < 8; ++b) {
          s[b] |= bits_of(sc, b, 0, 4);
          s[b + 8] |= bits_of(sc, b, 4, 4);
        }
        for (int b = 8; b < 12; ++b)
          for (int k = 0; k < 4; ++k) s[(b - 8) + 4 * k] |= bits_of(sc, b, 2 * k, 2) << 4;
        const double d = half_to_double(p + 108);
        for (int e = 0; e < 256; ++e) out[e] = scaled(d * (s[e / 16] - 32), q[e]);
      }
      break;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      out.assign(256, {});
      const bool q5 = t == GgmlType::Q5_K;
      const double d = half_to_double(p), dmin = half_to_double(p + 2);
      const uint8_t* sc = p + 4;
      int s[8] = {0}, m[8] = {0};
      for (int b = 0; b < 4; ++b) {
        s[b] = bits_of(sc, b, 0, 6);
        s[b + 4] |= bits_of(sc, b, 6, 2) << 4;
        m[b] = bits_of(sc, b + 4, 0, 6);
        m[b + 4] |= bits_of(sc, b + 4, 6, 2) << 4;
        s[b + 4] |= bits_of(sc, b + 8, 0, 4);
        m[b + 4] |= bits_of(sc, b + 8, 4, 4);
      }
      const uint8_t* qh = p + 16;
      const uint8_t* qs = p + (q5 ? 48 : 16);
      int q[256];
      for (int b = 0; b < 128; ++b) {
        q[64 * (b / 32) + b % 32] = bits_of(qs, b, 0, 4);
        q[64 * (b / 32) + 32 + b % 32] = bits_of(qs, b, 4, 4);
      }
      if (q5)
        for (int l = 0; l < 32; ++l)
          for (int k = 0; k < 8; ++k) q[32 * k + l] += 16 * bits_of(qh, l, k, 1);
      for (int e = 0; e < 256; ++e) out[e] = affine(d * s[e / 32], q[e], dmin * m[e / 32]);
      break;
    }
    case GgmlType::Q6_K: {
      out.assign(256, {});
      const uint8_t* ql = p;
      const uint8_t* qh = p + 128;
      const int8_t* sc = (const int8_t*)(p + 192);
      const double d = half_to_double(p + 208);
      int q[256];
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
          const int base = 128 * h + l;
          q[base] = bits_of(ql, 64 * h + l, 0, 4) | bits_of(qh, 32 * h + l, 0, 2) << 4;
          q[base + 32] = bits_of(ql, 64 * h + 32 + l, 0, 4) | bits_of(qh, 32 * h + l, 2, 2) << 4;
          q[base + 64] = bits_of(ql, 64 * h + l, 4, 4) | bits_of(qh, 32 * h + l, 4, 2) << 4;
          q[base + 96] = bits_of(ql, 64 * h + 32 + l, 4, 4) | bits_of(qh, 32 * h + l, 6, 2) << 4;
        }
      for (int e = 0; e < 256; ++e) out[e] = scaled(d * sc[e / 16], q[e] - 32);
      break;
    }
    case GgmlType::IQ4_XS: {
      out.assign(256, {});
      const double d = half_to_double(p);
      const unsigned sh = (unsigned)p[2] | ((unsigned)p[3] << 8);
      for (int sb = 0; sb < 8; ++sb) {
        const int ls = bits_of(p + 4, sb / 2, 4 * (sb % 2), 4) | (int)(((sh >> (2 * sb)) & 3) << 4);
        for (int byte = 0; byte < 16; ++byte) {
          out[32 * sb + byte] = scaled(d * (ls - 32), iq4[bits_of(p + 8, 16 * sb + byte, 0, 4)]);
          out[32 * sb + byte + 16] =
              scaled(d * (ls - 32), iq4[bits_of(p + 8, 16 * sb + byte, 4, 4)]);
        }
      }
      break;
    }
    case GgmlType::MXFP4: {
      // E8M0 scale 2^(e-127); E2M1 element: sign bit 3, exponent bits 1..2 (bias 1), mantissa bit
      // 0.
      out.assign(32, {});
      const double scale = std::ldexp(1.0, (int)p[0] - 127);
      for (int byte = 0; byte < 16; ++byte)
        for (int half = 0; half < 2; ++half) {
          const int c = bits_of(p + 1, byte, 4 * half, 4);
          const int ex = (c >> 1) & 3, man = c & 1;
          double v = ex == 0 ? 0.5 * man : (1.0 + 0.5 * man) * std::ldexp(1.0, ex - 1);
          if (c & 8) v = -v;
          out[byte + 16 * half] = scaled(scale, v);
        }
      break;
    }
    default: out.clear();
  }
}

}  // namespace moeflow::testref
