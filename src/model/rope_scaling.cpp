#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moeflow {
namespace {

// The dim (of n_rot) whose wavelength turns `rotations` times over n_ctx_orig positions.
double correction_dim(double rotations, int64_t n_rot, double base, int64_t n_ctx_orig) {
  return (double)n_rot * std::log((double)n_ctx_orig / (rotations * 2 * M_PI)) /
         (2 * std::log(base));
}

}  // namespace

std::vector<float> yarn_freq_divisors(int64_t n_rot, float base, float factor, int64_t n_ctx_orig,
                                      float beta_fast, float beta_slow) {
  if (n_rot <= 0 || n_rot % 2 != 0 || !(base > 1) || !(factor > 0) || n_ctx_orig <= 0 ||
      !(beta_fast > 0) || !(beta_slow > 0))
    fail("YaRN: bad parameters (n_rot {}, base {}, factor {}, original context {}, betas {}/{})",
         n_rot, base, factor, n_ctx_orig, beta_fast, beta_slow);
  const double low = std::max(0.0, correction_dim(beta_fast, n_rot, base, n_ctx_orig));
  double high = std::min((double)n_rot - 1, correction_dim(beta_slow, n_rot, base, n_ctx_orig));
  if (high == low) high += 0.001;  // a ramp of zero width is a step
  std::vector<float> out((size_t)n_rot / 2);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double ramp = std::clamp(((double)i - low) / (high - low), 0.0, 1.0);
    const double extrapolate = 1.0 - ramp;
    out[(size_t)i] = (float)(1.0 / ((1.0 - extrapolate) / factor + extrapolate));
  }
  return out;
}

float yarn_mscale(float factor) { return factor > 1.0f ? 1.0f + 0.1f * std::log(factor) : 1.0f; }

}  // namespace moeflow
