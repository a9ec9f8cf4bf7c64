// Forward-pass element-wise ops. Reductions use a fixed number of partial sums in a fixed
// order, so results do not depend on threads or on the dispatch level.
#include "backend/cpu/ops.h"

#include <cmath>

#include "core/error.h"

namespace moeflow {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  if (n <= 0) return;
  float part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += x[i + k] * x[i + k];
  float ss =
      ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / (float)n + eps);
  if (weight)
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale * weight[j];
  else
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale;
}

void layer_norm(const float* x, const float* weight, const float* bias, float* out, int64_t n,
                float eps) {
  if (n <= 0) return;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = (float)(sum / (double)n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (double)(x[i] - mean) * (x[i] - mean);
  const float scale = 1.0f / std::sqrt((float)(var / (double)n) + eps);
  for (int64_t j = 0; j < n; ++j) {
    float y = (x[j] - mean) * scale;
    if (weight) y *= weight[j];
    if (bias) y += bias[j];
    out[j] = y;
  }
}

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float gl = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + 0.044715f * g * g)));
    out[i] = gl * up[i];
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, float alpha,
                float limit) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0) {
      g = std::fmin(g, limit);
      u = std::fmax(-limit, std::fmin(u, limit));
    }
    out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

void rope_inplace(float* x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base,
                  bool neox) {
  if (n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0)
    fail("rope: n_rot {} must be even and within head_dim {}", n_rot, head_dim);
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    // Same float steps as the reference implementations: inv_freq = 1 / base^(2i / n_rot).
    const float inv_freq = 1.0f / std::pow(freq_base, (float)(2 * i) / (float)n_rot);
    const float theta = (float)pos * inv_freq;
    const float c = std::cos(theta), s = std::sin(theta);
    const int64_t a = neox ? i : 2 * i;
    const int64_t b = neox ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

namespace {

// YaRN: the dims whose wavelength spans fewer than beta_fast rotations over the original
// context are extrapolated, those beyond beta_slow interpolated, a linear ramp between.
float yarn_corr_dim(int64_t n_rot, int64_t n_ctx_orig, float beta, float base) {
  return (float)n_rot * std::log((float)n_ctx_orig / (beta * 2.0f * 3.14159265358979323846f)) /
         (2.0f * std::log(base));
}

float yarn_ramp(float low, float high, int64_t i0) {
  const float y = ((float)i0 / 2 - low) / std::fmax(0.001f, high - low);
  return 1.0f - std::fmin(1.0f, std::fmax(0.0f, y));
}

}  // namespace

void rope_ext_inplace(float* x, int64_t head_dim, int64_t pos, bool neox, const RopeParams& p) {
  const int64_t n_rot = p.n_rot;
  if (n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0)
    fail("rope: n_rot {} must be even and within head_dim {}", n_rot, head_dim);
  float corr0 = 0, corr1 = 0;
  if (p.ext_factor != 0) {
    corr0 =
        std::fmax(0.0f, std::floor(yarn_corr_dim(n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    corr1 = std::fmin((float)(n_rot - 1),
                      std::ceil(yarn_corr_dim(n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base)));
  }
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    float theta_extrap = (float)pos / std::pow(p.freq_base, (float)(2 * i) / (float)n_rot);
    if (p.freq_factors) theta_extrap /= p.freq_factors[i];
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = p.attn_factor;
    if (p.ext_factor != 0) {
      const float mix = yarn_ramp(corr0, corr1, 2 * i) * p.ext_factor;
      theta = theta_interp * (1 - mix) + theta_extrap * mix;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    const float c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
    const int64_t a = neox ? i : 2 * i;
    const int64_t b = neox ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale_add_inplace(float* acc, const float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += s * x[i];
}

}  // namespace moeflow
