// Decoders of the K-quant super-blocks (256 elements each). Element i of a block always uses
// sub-block scale i / 16 (Q2_K, Q3_K, Q6_K) or i / 32 (Q4_K, Q5_K); the code bits of element i
// sit in the byte / bit positions spelled out at each decoder. Arithmetic order follows the
// formats' reference decoders (scale product first) so results match them bit for bit.
#include "quant/blocks.h"
#include "quant/k_scales.h"
#include "quant/quant_impl.h"

namespace moeflow::quant_detail {

// 2-bit codes: element i in byte 32*(i/128) + i%32, bit pair (i%128)/32.
void dequantize_q2_k(const void* src, float* dst, int64_t n) {
  const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float dl = d * (float)(b->scales[j] & 0x0f);
      const float ml = dmin * (float)(b->scales[j] >> 4);
      for (int i = 16 * j; i < 16 * j + 16; ++i) {
        const int q = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        dst[i] = dl * (float)q - ml;
      }
    }
  }
}

// Q3_K: low 2 bits as in Q2_K; hmask[i%32] bit i/32 set means "no -4 offset".
void dequantize_q3_k(const void* src, float* dst, int64_t n) {
  const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK_K / 16; ++j) {
      const float dl = d * (float)q3k_get_scale(b->scales, j);
      for (int i = 16 * j; i < 16 * j + 16; ++i) {
        const int lo = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        const int hi = (b->hmask[i % 32] >> (i / 32)) & 1;
        dst[i] = dl * (float)(lo - (hi ? 0 : 4));
      }
    }
  }
}

// 4-bit codes: element i in byte 32*(i/64) + i%32, low nibble for (i%64) < 32.
void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      k4_get_scale_min(b->scales, j, sc, m);
      const float dl = d * (float)sc, ml = dmin * (float)m;
      const uint8_t* q = b->qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      for (int l = 0; l < 32; ++l) dst[32 * j + l] = dl * (float)((q[l] >> shift) & 0x0f) - ml;
    }
  }
}

// Q5_K: low 4 bits as in Q4_K, 5th bit in qh[i%32] bit i/32.
void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  const BlockQ5_K* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      k4_get_scale_min(b->scales, j, sc, m);
      const float dl = d * (float)sc, ml = dmin * (float)m;
      const uint8_t* q = b->qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0f) | (((b->qh[l] >> j) & 1) << 4);
        dst[32 * j + l] = dl * (float)v - ml;
      }
    }
  }
}

// Q6_K: with h = i/128, k = (i%128)/32, l = i%32: low nibble in ql[64h + 32(k&1) + l]
// (high nibble when k >= 2), top 2 bits in qh[32h + l] bits 2k..2k+1; codes are offset by 32.
void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = fp16_to_fp32(b->d);
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        const uint8_t* ql = b->ql + 64 * h + 32 * (k & 1);
        const uint8_t* qh = b->qh + 32 * h;
        const int lshift = 4 * (k >> 1), hshift = 2 * k;
        for (int l = 0; l < 32; ++l) {
          const int i = 128 * h + 32 * k + l;
          const int q = (((ql[l] >> lshift) & 0x0f) | (((qh[l] >> hshift) & 3) << 4)) - 32;
          dst[i] = d * (float)b->scales[i / 16] * (float)q;
        }
      }
    }
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, ++b, dst += QK_K) {
    const float d = b->d;
    for (int i = 0; i < QK_K; ++i) dst[i] = d * (float)b->qs[i];
  }
}

}  // namespace moeflow::quant_detail
