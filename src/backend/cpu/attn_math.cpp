#include "backend/cpu/attn_math.h"

#include "backend/cpu/dispatch.h"

namespace moeflow {
namespace {

float dot_generic(const float* a, const float* b, int64_t n) {
  float p[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) p[k] += a[i + k] * b[i + k];
  float s = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_generic(float* y, const float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The matmul dispatcher's level (which honours MOEFLOW_SIMD) decides for attention too.
bool have_avx2_fma() { return kernels::best_simd() >= kernels::Simd::Avx2; }

}  // namespace

DotF32Fn attn_dot_fn() {
  static const DotF32Fn fn = have_avx2_fma() ? attn_dot_avx2 : dot_generic;
  return fn;
}

AxpyF32Fn attn_axpy_fn() {
  static const AxpyF32Fn fn = have_avx2_fma() ? attn_axpy_avx2 : axpy_generic;
  return fn;
}

}  // namespace moeflow
