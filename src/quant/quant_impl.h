#pragma once
// Internal to the quant module: one dequantize/quantize pair per format family, dispatched by
// quant.cpp, plus the small numeric helpers they share.
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/fp16.h"
#include "core/ggml_type.h"

namespace moeflow::quant_detail {

// n is always a whole number of blocks here (quant.cpp checks it once).
void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);

void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);

void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);
void dequantize_mxfp4(const void* src, float* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
void quantize_iq4_xs(const float* src, void* dst, int64_t n);
void quantize_mxfp4(const float* src, void* dst, int64_t n);

// Round half away from zero (C roundf, the rounding every reference quantizer uses) for
// |v| < 2^23, without the libm call: v - trunc(v) is exact in float there.
inline int round_small(float v) {
  int i = (int)v;
  const float r = v - (float)i;
  if (r >= 0.5f)
    ++i;
  else if (r <= -0.5f)
    --i;
  return i;
}

// Clamped float -> int conversion that never hits the undefined out-of-range cast.
inline int clamp_round(float v, int lo, int hi) {
  if (!(v > (float)lo)) return lo;  // also catches NaN
  if (v >= (float)hi) return hi;
  return round_small(v);
}
// Branch-free variant for the scale searches, where data-dependent rounding branches would
// mispredict on every other element. Rounds half up (after clamping), which only differs from
// clamp_round on exact ties; the searches score whatever codes they produce, so that is fine.
inline int clamp_round_fast(float v, int lo, int hi) {
  v = v > (float)lo ? v : (float)lo;  // NaN -> lo
  v = v < (float)hi ? v : (float)hi;
  return (int)(v - (float)lo + 0.5f) + lo;
}
inline int clamp_trunc(float v, int lo, int hi) {
  if (!(v > (float)lo)) return lo;
  if (v >= (float)hi) return hi;
  return (int)v;
}

// Largest |x| of a block; fails on NaN/Inf because no block format can hold them and a silent
// garbage block would be far harder to trace than an error here.
inline float block_amax(const float* x, int n, GgmlType t) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!(a <= 3.4e38f))
      fail("quantize {}: non-finite input value {} (element {} of a block)", type_name(t), x[i], i);
    amax = a > amax ? a : amax;
  }
  return amax;
}

// Stores a scale as fp16, failing when it does not fit (the block would decode to Inf/NaN).
inline uint16_t store_scale(float d, GgmlType t) {
  const uint16_t h = fp32_to_fp16(d);
  if ((h & 0x7c00) == 0x7c00)
    fail("quantize {}: block scale {} overflows fp16 (input magnitude too large)", type_name(t), d);
  return h;
}

// Super-block scale as fp16, rounded up in magnitude when it lands among the fp16 subnormals:
// there rounding to nearest can give 0 (or lose most bits), while rounding up keeps the block
// alive and lets the integer sub-scales (which then stay <= their maximum) carry the precision.
inline uint16_t store_super_scale(float d, GgmlType t) {
  uint16_t h = store_scale(d, t);
  const float a = std::fabs(d);
  if (a > 0 && a < 6.103515625e-05f && std::fabs(fp16_to_fp32(h)) < a) ++h;  // next magnitude up
  return h;
}

}  // namespace moeflow::quant_detail
