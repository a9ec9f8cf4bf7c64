#pragma once
// Element-wise and normalisation ops of the forward pass (float32).
#include <cstdint>

namespace moeflow {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
void softmax_inplace(float* x, int64_t n);
// out = silu(gate) * up
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// RoPE on one head vector of length head_dim (rotating the first n_rot dims).
// neox = true rotates pairs (i, i + n_rot/2); false rotates (2i, 2i+1).
void rope_inplace(float* x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base,
                  bool neox);
void add_inplace(float* x, const float* y, int64_t n);
void scale_add_inplace(float* acc, const float* x, float s, int64_t n);  // acc += s * x

}  // namespace moeflow
