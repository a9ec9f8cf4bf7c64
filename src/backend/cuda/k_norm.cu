// RMSNorm and LayerNorm: one block per row, the row's statistics by a block reduction, then
// each thread scales the elements it read (so `out` may be `x`). The element formulas are the
// CPU's (backend/cpu/ops.cpp) in float; LayerNorm takes the mean first, then the variance of the
// centred values (two passes, as the CPU does in double).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

__global__ void rms_norm_kernel(CMat x, const float* __restrict__ weight, Mat out, float eps) {
  const float* xr = x.p + blockIdx.x * x.stride;
  float* o = out.p + blockIdx.x * out.stride;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(ss / (float)x.cols + eps);
  for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x)
    o[i] = weight ? xr[i] * scale * weight[i] : xr[i] * scale;
}

__global__ void layer_norm_kernel(CMat x, const float* __restrict__ weight,
                                  const float* __restrict__ bias, Mat out, float eps) {
  const float* xr = x.p + blockIdx.x * x.stride;
  float* o = out.p + blockIdx.x * out.stride;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) sum += xr[i];
  const float mean = block_sum(sum) / (float)x.cols;
  float var = 0.0f;
  for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) var += (xr[i] - mean) * (xr[i] - mean);
  var = block_sum(var) / (float)x.cols;
  const float scale = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) {
    float y = (xr[i] - mean) * scale;
    if (weight) y *= weight[i];
    if (bias) y += bias[i];
    o[i] = y;
  }
}

}  // namespace

void rms_norm(CMat x, const float* weight, Mat out, float eps, cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return;
  if (x.rows > 0x7fffffff) throw_error("cuda rms_norm: too many rows");
  rms_norm_kernel<<<(unsigned)x.rows, row_block(x.cols / 4), 0, s>>>(x, weight, out, eps);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

void layer_norm(CMat x, const float* weight, const float* bias, Mat out, float eps,
                cudaStream_t s) {
  if (x.rows == 0 || x.cols == 0) return;
  if (x.rows > 0x7fffffff) throw_error("cuda layer_norm: too many rows");
  layer_norm_kernel<<<(unsigned)x.rows, row_block(x.cols / 4), 0, s>>>(x, weight, bias, out, eps);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace moeflow::cuda
