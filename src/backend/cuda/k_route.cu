// Routing on the device: one block per token computes the gate probabilities of all experts
// (softmax, sigmoid, or the raw logits for softmax-after-top-k), adds the selection bias, picks
// the top k by k block-wide arg-max passes (ties: the lower expert, the host rule of
// backend/backend.cpp route_on_host) and finishes the k weights on one thread as the host rule
// does. Group-limited selection stays on the host (the backend falls back to route_on_host).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kMaxK = 64;

struct Best {
  float v;
  int e;
};

// a better than b: larger score, then the lower expert; any expert beats none (e = -1).
__device__ __forceinline__ bool better(const Best& a, const Best& b) {
  if (a.e < 0) return false;
  if (b.e < 0) return true;
  return a.v > b.v || (a.v == b.v && a.e < b.e);
}

__device__ Best block_best(Best b) {
  __shared__ float sv[32];
  __shared__ int se[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    const Best x{__shfl_xor_sync(kFullMask, b.v, o), __shfl_xor_sync(kFullMask, b.e, o)};
    if (better(x, b)) b = x;
  }
  __syncthreads();
  if (lane == 0) {
    sv[warp] = b.v;
    se[warp] = b.e;
  }
  __syncthreads();
  b = lane < nw ? Best{sv[lane], se[lane]} : Best{-INFINITY, -1};
  for (int o = 16; o > 0; o >>= 1) {
    const Best x{__shfl_xor_sync(kFullMask, b.v, o), __shfl_xor_sync(kFullMask, b.e, o)};
    if (better(x, b)) b = x;
  }
  return b;
}

__global__ void route_kernel(CMat logits, RouteArgs a, const float* __restrict__ bias,
                             int32_t* __restrict__ experts, float* __restrict__ weights,
                             float* __restrict__ probs) {
  extern __shared__ float sh[];  // p[E], sel[E]
  const int64_t t = blockIdx.x, E = logits.cols;
  float* p = sh;
  float* sel = sh + E;
  __shared__ int picked[kMaxK];
  __shared__ float w[kMaxK];
  const float* lg = logits.p + t * logits.stride;

  if (a.sigmoid) {
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) p[e] = 1.0f / (1.0f + expf(-lg[e]));
  } else if (a.softmax_after_topk) {
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) p[e] = lg[e];
  } else {
    float mx = -INFINITY;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, lg[e]);
    mx = block_max(mx);
    float sum = 0.0f;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) sum += p[e] = expf(lg[e] - mx);
    const float inv = 1.0f / block_sum(sum);
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) p[e] *= inv;
  }
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    sel[e] = p[e] + (bias ? bias[e] : 0.0f);
    probs[t * E + e] = p[e];
  }
  __syncthreads();
  for (int r = 0; r < a.k; ++r) {
    Best b{-INFINITY, -1};
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
      bool taken = false;
      for (int j = 0; j < r; ++j) taken |= picked[j] == (int)e;
      const Best c{sel[e], (int)e};
      if (!taken && better(c, b)) b = c;
    }
    b = block_best(b);
    if (threadIdx.x == 0) {
      picked[r] = b.e;
      w[r] = p[b.e];
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const int k = a.k;
  if (a.softmax_after_topk) {
    float mx = w[0];
    for (int r = 1; r < k; ++r) mx = fmaxf(mx, w[r]);
    float sum = 0.0f;
    for (int r = 0; r < k; ++r) sum += w[r] = expf(w[r] - mx);
    for (int r = 0; r < k; ++r) w[r] /= sum;
  }
  if (a.norm_weights) {
    float s = 0.0f;
    for (int r = 0; r < k; ++r) s += w[r];
    if (s > 0)
      for (int r = 0; r < k; ++r) w[r] /= s;
  }
  for (int r = 0; r < k; ++r) {
    experts[t * k + r] = picked[r];
    weights[t * k + r] = a.scale != 1.0f ? w[r] * a.scale : w[r];
  }
}

}  // namespace

void route(CMat logits, const RouteArgs& a, const float* bias, int32_t* experts, float* weights,
           float* probs, cudaStream_t s) {
  if (a.k < 1 || a.k > kMaxK || a.k > logits.cols)
    throw_error("cuda route: top-k " + std::to_string(a.k) + " outside 1.." +
                std::to_string(logits.cols < kMaxK ? logits.cols : kMaxK));
  if (logits.rows == 0) return;
  const size_t smem = 2 * sizeof(float) * (size_t)logits.cols;
  if (smem > 48 * 1024)
    throw_error("cuda route: too many experts for one block (" + std::to_string(logits.cols) + ")");
  route_kernel<<<(unsigned)logits.rows, kBlock, smem, s>>>(logits, a, bias, experts, weights,
                                                           probs);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace moeflow::cuda
