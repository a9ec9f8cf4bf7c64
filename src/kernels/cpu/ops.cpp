// Forward-pass element-wise ops. Reductions use a fixed number of partial sums in a fixed
// order, so results do not depend on threads or on the dispatch level.
#include "kernels/cpu/ops.h"

#include <cmath>

#include "core/error.h"

namespace moeflow {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  if (n <= 0) return;
  float part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] += x[i + k] * x[i + k];
  float ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / (float)n + eps);
  if (weight)
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale * weight[j];
  else
    for (int64_t j = 0; j < n; ++j) out[j] = x[j] * scale;
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

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale_add_inplace(float* acc, const float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += s * x[i];
}

}  // namespace moeflow
