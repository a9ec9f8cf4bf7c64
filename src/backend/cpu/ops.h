#pragma once
// Element-wise and normalisation ops of the forward pass (float32).
#include <cstdint>

#include "backend/backend.h"

namespace moeflow {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
// (x - mean) / sqrt(var + eps) * weight + bias (weight, bias may be null). out may be x.
void layer_norm(const float* x, const float* weight, const float* bias, float* out, int64_t n,
                float eps);
void softmax_inplace(float* x, int64_t n);
// out = silu(gate) * up
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out = gelu(gate) * up (tanh approximation)
void geglu(const float* gate, const float* up, float* out, int64_t n);
// gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit) (limit 0: no clamp),
// out = g * sigmoid(alpha * g) * (u + 1)
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha,
                float limit);
// RoPE on one head vector of length head_dim (rotating the first n_rot dims).
// neox = true rotates pairs (i, i + n_rot/2); false rotates (2i, 2i+1).
void rope_inplace(float* x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base,
                  bool neox);
// RoPE with the scaling hooks of RopeParams (linear interpolation, YaRN, per-pair frequency
// factors), as ggml defines them.
void rope_ext_inplace(float* x, int64_t head_dim, int64_t pos, bool neox, const RopeParams& p);
void add_inplace(float* x, const float* y, int64_t n);
void scale_add_inplace(float* acc, const float* x, float s, int64_t n);  // acc += s * x

}  // namespace moeflow
