// Decode products (one to kMaxVecTokens tokens): the activations are quantized to 8 bits per
// 32-element chunk once, then every weight row is dotted by one warp, each lane taking whole
// chunks (block_decode.h decodes the chunk, dp4a does the integer dot), lanes combined by a
// warp reduction. The decoded chunk serves every token of the call; each token's sum runs the
// same operations in the same order whatever the number of tokens, so a row's result does not
// depend on how tokens are batched. Float weights take the float activations directly.
#include <string>
#include <type_traits>

#include "backend/cuda/block_decode.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__global__ void quantize_kernel(CMat x, int8_t* __restrict__ q, float* __restrict__ d) {
  const int64_t chunks = x.cols / 32;
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= chunks * x.rows) return;
  const int64_t r = i / chunks, c = i % chunks;
  float v[32];
  const float* src = x.p + r * x.stride + c * 32;
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = src[j];
  d[i] = quantize_chunk(v, q + r * x.cols + c * 32);
}

template <class F, int NT>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matvec_quant_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows,
                        int64_t chunks, const int8_t* __restrict__ q, const float* __restrict__ d,
                        int n, Mat y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const uint8_t* wr = w + row * row_bytes;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t c = lane; c < chunks; c += 32) {
    Chunk32 ch;
    F::decode(wr + (c / F::kChunks) * F::kBytes, (int)(c % F::kChunks), ch);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n) {
        const int4* a4 = reinterpret_cast<const int4*>(q + (t * chunks + c) * 32);
        const int4 a0 = a4[0], a1 = a4[1];
        const int32_t a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        acc[t] += chunk_dot(ch, a, d[t * chunks + c]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < n) y.p[t * y.stride + row] = s;
  }
}

template <GgmlType T, int NT>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    matvec_float_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                        CMat x, int n, Mat y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * (int64_t)kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const uint8_t* wr = w + row * row_bytes;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t i = lane; i < cols; i += 32) {
    const float wv = float_weight(T, wr, i);
#pragma unroll
    for (int t = 0; t < NT; ++t)
      if (t < n) acc[t] += wv * x.p[t * x.stride + i];
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < n) y.p[t * y.stride + row] = s;
  }
}

// Calls f(std::integral_constant<int, NT>) for the smallest NT in {1, 2, 4, 8} >= n.
template <typename Fn>
void with_token_count(int n, Fn&& f) {
  if (n <= 1)
    f(std::integral_constant<int, 1>{});
  else if (n <= 2)
    f(std::integral_constant<int, 2>{});
  else if (n <= 4)
    f(std::integral_constant<int, 4>{});
  else
    f(std::integral_constant<int, 8>{});
}

}  // namespace

void quantize_activations(CMat x, int8_t* q, float* d, cudaStream_t s) {
  const int64_t n = x.rows * (x.cols / 32);
  if (n == 0) return;
  quantize_kernel<<<grid_for(n, 128), 128, 0, s>>>(x, q, d);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

void matvec_quant(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                  const int8_t* q, const float* d, int n, Mat y, cudaStream_t s) {
  if (n < 1 || n > kMaxVecTokens) throw_error("cuda matvec: " + std::to_string(n) + " tokens");
  if (rows == 0) return;
  const unsigned grid = grid_for(rows, kWarpsPerBlock);
  const bool ok = with_format(t, [&](auto f) {
    using F = decltype(f);
    with_token_count(n, [&](auto nt) {
      matvec_quant_kernel<F, decltype(nt)::value>
          <<<grid, 32 * kWarpsPerBlock, 0, s>>>(w, row_bytes, rows, cols / 32, q, d, n, y);
    });
  });
  if (!ok) throw_error(std::string("cuda matvec: no kernel for weight type ") + type_name(t));
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

void matvec_float(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                  CMat x, Mat y, cudaStream_t s) {
  const int n = (int)x.rows;
  if (n < 1 || n > kMaxVecTokens) throw_error("cuda matvec: " + std::to_string(n) + " tokens");
  if (rows == 0) return;
  const unsigned grid = grid_for(rows, kWarpsPerBlock);
  with_token_count(n, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    switch (t) {
      case GgmlType::F32:
        matvec_float_kernel<GgmlType::F32, NT>
            <<<grid, 32 * kWarpsPerBlock, 0, s>>>(w, row_bytes, rows, cols, x, n, y);
        break;
      case GgmlType::F16:
        matvec_float_kernel<GgmlType::F16, NT>
            <<<grid, 32 * kWarpsPerBlock, 0, s>>>(w, row_bytes, rows, cols, x, n, y);
        break;
      case GgmlType::BF16:
        matvec_float_kernel<GgmlType::BF16, NT>
            <<<grid, 32 * kWarpsPerBlock, 0, s>>>(w, row_bytes, rows, cols, x, n, y);
        break;
      default:
        throw_error(std::string("cuda matvec: no float kernel for weight type ") + type_name(t));
    }
  });
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace moeflow::cuda
