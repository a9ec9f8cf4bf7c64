#pragma once
// RoPE scalings that the architectures express through the rope op's per-pair frequency
// divisors (RopeParams::freq_factors) instead of its built-in YaRN.
#include <cstdint>
#include <vector>

namespace moeflow {

// YaRN as gpt-oss's reference implementation (and transformers with truncate=false) computes
// it: pair i's frequency is base^(-2i/n_rot) * ((1 - m_i) / factor + m_i), where m_i ramps
// linearly from 1 at the dim whose wavelength makes beta_fast turns over n_ctx_orig to 0 at the
// one that makes beta_slow turns, the ramp ends left unrounded (ggml rounds them to integers).
// Returns the divisors 1 / ((1 - m_i) / factor + m_i), n_rot / 2 of them.
std::vector<float> yarn_freq_divisors(int64_t n_rot, float base, float factor, int64_t n_ctx_orig,
                                      float beta_fast, float beta_slow);

// YaRN's magnitude factor: 1 + 0.1 ln(factor) when factor > 1, else 1.
float yarn_mscale(float factor);

}  // namespace moeflow
