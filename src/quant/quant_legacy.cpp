// The 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//
// Quantizers follow the formats' reference algorithm (scale from the block's extreme values,
// round each element) so our files are byte-identical to those written by ggml/gguf-py; that
// keeps models made by `moeflow gen-model` comparable with other engines bit for bit.
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant_impl.h"

namespace moeflow::quant_detail {
namespace {

// Signed element with the largest magnitude (first one on ties).
float signed_absmax(const float* x, int n, GgmlType t) {
  block_amax(x, n, t);  // rejects NaN/Inf
  float best = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      best = x[i];
    }
  }
  return best;
}

void min_max(const float* x, int n, GgmlType t, float& mn, float& mx) {
  block_amax(x, n, t);
  mn = x[0];
  mx = x[0];
  for (int i = 1; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
}

uint32_t load_u32(const uint8_t* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

}  // namespace

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t ib = 0; ib < n / QK4_0; ++ib, ++b, dst += QK4_0) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      dst[j] = (float)((b->qs[j] & 0x0f) - 8) * d;
      dst[j + QK4_0 / 2] = (float)((b->qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t ib = 0; ib < n / QK4_0; ++ib, ++b, src += QK4_0) {
    const float mx = signed_absmax(src, QK4_0, GgmlType::Q4_0);
    const float d = mx / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = store_scale(d, GgmlType::Q4_0);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int q0 = clamp_trunc(src[j] * id + 8.5f, 0, 15);
      const int q1 = clamp_trunc(src[j + QK4_0 / 2] * id + 8.5f, 0, 15);
      b->qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t ib = 0; ib < n / QK4_1; ++ib, ++b, dst += QK4_1) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      dst[j] = (float)(b->qs[j] & 0x0f) * d + m;
      dst[j + QK4_1 / 2] = (float)(b->qs[j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t ib = 0; ib < n / QK4_1; ++ib, ++b, src += QK4_1) {
    float mn, mx;
    min_max(src, QK4_1, GgmlType::Q4_1, mn, mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = store_scale(d, GgmlType::Q4_1);
    b->m = store_scale(mn, GgmlType::Q4_1);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int q0 = clamp_trunc((src[j] - mn) * id + 0.5f, 0, 15);
      const int q1 = clamp_trunc((src[j + QK4_1 / 2] - mn) * id + 0.5f, 0, 15);
      b->qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t ib = 0; ib < n / QK5_0; ++ib, ++b, dst += QK5_0) {
    const float d = fp16_to_fp32(b->d);
    const uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int lo = (b->qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
      const int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      dst[j] = (float)(lo - 16) * d;
      dst[j + QK5_0 / 2] = (float)(hi - 16) * d;
    }
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  BlockQ5_0* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t ib = 0; ib < n / QK5_0; ++ib, ++b, src += QK5_0) {
    const float mx = signed_absmax(src, QK5_0, GgmlType::Q5_0);
    const float d = mx / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = store_scale(d, GgmlType::Q5_0);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int q0 = clamp_trunc(src[j] * id + 16.5f, 0, 31);
      const int q1 = clamp_trunc(src[j + QK5_0 / 2] * id + 16.5f, 0, 31);
      b->qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    store_u32(b->qh, qh);
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t ib = 0; ib < n / QK5_1; ++ib, ++b, dst += QK5_1) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    const uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int lo = (b->qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
      const int hi = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      dst[j] = (float)lo * d + m;
      dst[j + QK5_1 / 2] = (float)hi * d + m;
    }
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  BlockQ5_1* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t ib = 0; ib < n / QK5_1; ++ib, ++b, src += QK5_1) {
    float mn, mx;
    min_max(src, QK5_1, GgmlType::Q5_1, mn, mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = store_scale(d, GgmlType::Q5_1);
    b->m = store_scale(mn, GgmlType::Q5_1);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int q0 = clamp_trunc((src[j] - mn) * id + 0.5f, 0, 31);
      const int q1 = clamp_trunc((src[j + QK5_1 / 2] - mn) * id + 0.5f, 0, 31);
      b->qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    store_u32(b->qh, qh);
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib, ++b, dst += QK8_0) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK8_0; ++j) dst[j] = (float)b->qs[j] * d;
  }
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib, ++b, src += QK8_0) {
    const float amax = block_amax(src, QK8_0, GgmlType::Q8_0);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = store_scale(d, GgmlType::Q8_0);
    for (int j = 0; j < QK8_0; ++j) b->qs[j] = (int8_t)clamp_round(src[j] * id, -127, 127);
  }
}

}  // namespace moeflow::quant_detail
