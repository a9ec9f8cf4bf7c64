#pragma once
// The two inner loops of attention (q.k and p*v accumulation), vectorised: the generic
// kernels are built for weight matrices, these for short float rows of the KV cache.
#include <cstdint>

namespace moeflow {

using DotF32Fn = float (*)(const float* a, const float* b, int64_t n);
using AxpyF32Fn = void (*)(float* y, const float* x, float a, int64_t n);

// Picked once from the CPU features (AVX2+FMA when present).
DotF32Fn attn_dot_fn();
AxpyF32Fn attn_axpy_fn();

float attn_dot_avx2(const float* a, const float* b, int64_t n);
void attn_axpy_avx2(float* y, const float* x, float a, int64_t n);

}  // namespace moeflow
