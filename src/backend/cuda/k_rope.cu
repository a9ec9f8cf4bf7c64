// RoPE: one thread per rotated pair of one head of one row. The angle is computed with the
// CPU's float steps (backend/cpu/ops.cpp rope_inplace / rope_ext_inplace): powf for the
// inverse frequency, then the linear / YaRN / frequency-factor hooks, cosf and sinf (full
// precision; the build never uses fast math).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

__device__ __forceinline__ float yarn_ramp(float low, float high, int64_t i0) {
  const float y = ((float)i0 / 2 - low) / fmaxf(0.001f, high - low);
  return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

__global__ void rope_kernel(Mat x, RopeArgs a) {
  const int64_t half = a.n_rot / 2;
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= x.rows * a.n_head * half) return;
  const int64_t pair = i % half, head = (i / half) % a.n_head, t = i / (half * a.n_head);
  const int64_t pos = a.pos0 + t;
  float c, s;
  if (a.plain) {
    const float inv_freq = 1.0f / powf(a.freq_base, (float)(2 * pair) / (float)a.n_rot);
    const float theta = (float)pos * inv_freq;
    c = cosf(theta);
    s = sinf(theta);
  } else {
    float theta_extrap = (float)pos / powf(a.freq_base, (float)(2 * pair) / (float)a.n_rot);
    if (a.freq_factors) theta_extrap /= a.freq_factors[pair];
    const float theta_interp = a.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = a.attn_factor;
    if (a.ext_factor != 0.0f) {
      const float mix = yarn_ramp(a.corr0, a.corr1, 2 * pair) * a.ext_factor;
      theta = theta_interp * (1 - mix) + theta_extrap * mix;
      mscale *= 1.0f + 0.1f * logf(1.0f / a.freq_scale);
    }
    c = cosf(theta) * mscale;
    s = sinf(theta) * mscale;
  }
  float* h = x.p + t * x.stride + head * a.head_dim;
  const int64_t ia = a.neox ? pair : 2 * pair, ib = a.neox ? pair + half : 2 * pair + 1;
  const float x0 = h[ia], x1 = h[ib];
  h[ia] = x0 * c - x1 * s;
  h[ib] = x0 * s + x1 * c;
}

}  // namespace

void rope(Mat x, const RopeArgs& a, cudaStream_t s) {
  if (a.n_rot < 0 || a.n_rot > a.head_dim || a.n_rot % 2 != 0)
    throw_error("rope: n_rot " + std::to_string(a.n_rot) + " must be even and within head_dim " +
                std::to_string(a.head_dim));
  const int64_t n = x.rows * a.n_head * (a.n_rot / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n, 128), 128, 0, s>>>(x, a);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace moeflow::cuda
