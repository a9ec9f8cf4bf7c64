// Activation quantizers: Q8_0 (one fp16 scale per 32), Q8_1 (Q8_0 plus the fp16 block sum the
// Q4_1/Q5_1 minimums multiply) and Q8_K (one float scale per 256 plus
// 16-element sums, which let K-quant kernels apply per-group minimums without touching qs).
#include <cmath>

#include "backend/cpu/kernel_table.h"
#include "core/fp16.h"
#include "quant/blocks.h"

namespace moeflow::kernels {
namespace {

// Round to nearest (ties to even) for |x| < 2^22 without a libm call: adding 1.5 * 2^23
// leaves the rounded integer in the low mantissa bits.
inline int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  __builtin_memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace

namespace {

// One 32-element block: fp16 scale amax/127 and nearest quants; returns the unrounded scale
// and the sum of the quants (Q8_1 stores their product).
float quantize_block32(const float* xb, uint16_t& d16, int8_t* qs, int& sum) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  d16 = fp32_to_fp16(d);
  sum = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j] = (int8_t)nearest_int(xb[j] * id);
    sum += qs[j];
  }
  return d;
}

}  // namespace

void quantize_q8_0(const float* x, int64_t n, void* out) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(out);
  int sum;
  for (int64_t i = 0; i < n / QK8_0; ++i) quantize_block32(x + i * QK8_0, y[i].d, y[i].qs, sum);
}

// s is rounded to fp16 from the unrounded scale, as GGML's Q8_1 defines it: Q4_1/Q5_1 files are
// made and validated with that arithmetic, and with the exact integer sum instead the min
// term drifted from llama.cpp's by enough to flip a few router choices in every thousand rows.
void quantize_q8_1(const float* x, int64_t n, void* out) {
  BlockQ8_1* y = static_cast<BlockQ8_1*>(out);
  int sum;
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    const float d = quantize_block32(x + i * QK8_1, y[i].d, y[i].qs, sum);
    y[i].s = fp32_to_fp16(d * (float)sum);
  }
}

void quantize_q8_k(const float* x, int64_t n, void* out) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(out);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* xb = x + i * QK_K;
    // Scale by the signed extreme so that it maps to exactly -127: every q is then in
    // [-127, 127], which the unsigned-by-signed SIMD multiplies rely on.
    float amax = 0, vmax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float a = std::fabs(xb[j]);
      if (a > amax) {
        amax = a;
        vmax = xb[j];
      }
    }
    BlockQ8_K& b = y[i];
    if (amax == 0.f || !std::isfinite(amax)) {
      b.d = amax == 0.f ? 0.f : NAN;
      for (int j = 0; j < QK_K; ++j) b.qs[j] = 0;
      for (int g = 0; g < QK_K / 16; ++g) b.bsums[g] = 0;
      continue;
    }
    const float iscale = -127.f / vmax;
    for (int j = 0; j < QK_K; ++j) {
      const int v = nearest_int(iscale * xb[j]);
      b.qs[j] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    for (int g = 0; g < QK_K / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b.qs[g * 16 + j];
      b.bsums[g] = (int16_t)s;
    }
    b.d = 1.f / iscale;
  }
}

}  // namespace moeflow::kernels
