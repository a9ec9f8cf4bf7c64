// The portable delta-rule step (delta_rule.h) and the choice between the levels.
#include "backend/cpu/delta_rule.h"

#include <algorithm>

#include "backend/cpu/dispatch.h"

namespace moeflow::kernels {

void delta_step_generic(float* S, int64_t hk, int64_t hv, const DeltaToken& t) {
  constexpr int64_t W = 16;  // columns per block: the accumulators stay in registers
  for (int64_t j0 = 0; j0 < hv; j0 += W) {
    const int64_t w = std::min(W, hv - j0);
    float sk[W] = {}, sq[W] = {};
    for (int64_t i = 0; i < hk; ++i) {
      const float* Si = S + i * hv + j0;
      for (int64_t j = 0; j < w; ++j) {
        sk[j] += Si[j] * t.k[i];
        sq[j] += Si[j] * t.q[i];
      }
    }
    float d[W];
    for (int64_t j = 0; j < w; ++j) {
      d[j] = (t.v[j0 + j] - t.decay * sk[j]) * t.beta;
      t.out[j0 + j] = t.decay * sq[j] + t.kq * d[j];
    }
    for (int64_t i = 0; i < hk; ++i) {
      float* Si = S + i * hv + j0;
      for (int64_t j = 0; j < w; ++j) Si[j] = t.decay * Si[j] + t.k[i] * d[j];
    }
  }
}

DeltaStepFn delta_step_fn(int64_t hv) {
  const Simd level = active_simd();
  if (level >= Simd::Avx512 && hv % 16 == 0) return delta_step_avx512;
  if (level >= Simd::Avx2 && hv % 8 == 0) return delta_step_avx2;
  return delta_step_generic;
}

}  // namespace moeflow::kernels
