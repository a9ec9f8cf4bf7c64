#pragma once
// Reductions and launch helpers shared by the kernels. Reductions combine in a fixed tree order
// (xor shuffles, then warp 0 over the warps' partials), so every result is the same from run
// to run: the CUDA backend is deterministic, as the engine's exact modes need.
#include <cstdint>

namespace moeflow::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// Safe to call several times in a row: the scratch is fenced on entry and exit.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = lane < nw ? part[lane] : 0.0f;
  t = warp_sum(t);
  return t;
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = lane < nw ? part[lane] : -INFINITY;
  t = warp_max(t);
  return t;
}

inline unsigned grid_for(int64_t n, int block) { return (unsigned)((n + block - 1) / block); }

// Threads per block for a per-row kernel over `cols` elements: a power of two in [32, 1024].
inline int row_block(int64_t cols) {
  int b = 32;
  while (b < 1024 && b < cols) b *= 2;
  return b;
}

}  // namespace moeflow::cuda
