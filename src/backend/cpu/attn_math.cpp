#include "backend/cpu/attn_math.h"

#include <cstring>

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

// The tiles as the pair-by-pair loops, for the levels without tile kernels of their own.
void qk_tile_pairs(const float* const* q, int nq, const float* k, int64_t k_stride, int64_t j0,
                   int64_t j1, int64_t hd, float scale, float* s, int64_t s_stride) {
  const DotF32Fn dot = attn_dot_fn();
  for (int u = 0; u < nq; ++u)
    for (int64_t j = j0; j < j1; ++j) s[u * s_stride + j] = dot(q[u], k + j * k_stride, hd) * scale;
}

void pv_tile_pairs(float* const* o, int nq, const float* p, int64_t p_stride, const int64_t* lo,
                   const int64_t* hi, const float* v, int64_t v_stride, int64_t hdv) {
  const AxpyF32Fn axpy = attn_axpy_fn();
  for (int u = 0; u < nq; ++u) {
    std::memset(o[u], 0, hdv * sizeof(float));
    for (int64_t j = lo[u]; j < hi[u]; ++j) axpy(o[u], v + j * v_stride, p[u * p_stride + j], hdv);
  }
}

bool have_avx512() { return kernels::best_simd() >= kernels::Simd::Avx512; }

}  // namespace

DotF32Fn attn_dot_fn() {
  static const DotF32Fn fn = have_avx2_fma() ? attn_dot_avx2 : dot_generic;
  return fn;
}

AxpyF32Fn attn_axpy_fn() {
  static const AxpyF32Fn fn = have_avx2_fma() ? attn_axpy_avx2 : axpy_generic;
  return fn;
}

QkTileFn attn_qk_tile_fn() {
  static const QkTileFn fn = have_avx512()     ? attn_qk_tile_avx512
                             : have_avx2_fma() ? attn_qk_tile_avx2
                                               : qk_tile_pairs;
  return fn;
}

PvTileFn attn_pv_pairs_fn() { return pv_tile_pairs; }

QkTileFn attn_qk_decode_fn() {
  static const QkTileFn fn = have_avx512() ? attn_qk_tile_avx512 : qk_tile_pairs;
  return fn;
}

PvTileFn attn_pv_tile_fn() {
  static const PvTileFn fn = have_avx512()     ? attn_pv_tile_avx512
                             : have_avx2_fma() ? attn_pv_tile_avx2
                                               : pv_tile_pairs;
  return fn;
}

}  // namespace moeflow
