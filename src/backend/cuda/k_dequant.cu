// Weights to floats: tiles of a block-quantized matrix to fp16 for the prefill GEMM, embedding
// rows to float32, activations to 16 bits. One thread decodes one 32-element chunk with the
// decoders of block_decode.h (the values quant/quant.h's dequantize_row gives, bit for bit,
// before the fp16 rounding of the tiles).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "backend/cuda/block_decode.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

// Writes the 32 values of chunk c of `row` to out[0..32).
template <class F, typename Out>
__device__ __forceinline__ void decode_to(const uint8_t* row, int64_t c, Out* out) {
  Chunk32 ch;
  F::decode(row + (c / F::kChunks) * F::kBytes, (int)(c % F::kChunks), ch);
#pragma unroll
  for (int i = 0; i < 32; ++i) store(out + i, chunk_value(ch, i));
}

template <class F, typename Out>
__global__ void dequant_rows_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows,
                                    int64_t chunks, Out* __restrict__ out, int64_t out_stride) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * chunks) return;
  const int64_t r = i / chunks, c = i % chunks;
  decode_to<F>(w + r * row_bytes, c, out + r * out_stride + c * 32);
}

template <class F>
__global__ void get_rows_quant_kernel(const uint8_t* __restrict__ table, size_t row_bytes,
                                      int64_t chunks, IndexArray ids, Mat out) {
  const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int j = blockIdx.y;
  if (c >= chunks) return;
  decode_to<F>(table + (int64_t)ids[j] * row_bytes, c, out.p + j * out.stride + c * 32);
}

template <GgmlType T>
__global__ void get_rows_float_kernel(const uint8_t* __restrict__ table, size_t row_bytes,
                                      int64_t cols, IndexArray ids, Mat out) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int j = blockIdx.y;
  if (i >= cols) return;
  out.p[j * out.stride + i] = float_weight(T, table + (int64_t)ids[j] * row_bytes, i);
}

__global__ void to_16bit_kernel(CMat x, void* out, bool bf16) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= x.rows * x.cols) return;
  const int64_t r = i / x.cols, c = i % x.cols;
  const float v = x.p[r * x.stride + c];
  if (bf16)
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
  else
    static_cast<__half*>(out)[i] = __float2half_rn(v);
}

}  // namespace

void dequantize_rows(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols,
                     void* out, int64_t out_stride, bool half_out, cudaStream_t s) {
  const int64_t chunks = cols / 32, n = rows * chunks;
  if (n == 0) return;
  const bool ok = with_format(t, [&](auto f) {
    using F = decltype(f);
    if (half_out)
      dequant_rows_kernel<F><<<grid_for(n, 128), 128, 0, s>>>(
          w, row_bytes, rows, chunks, static_cast<__half*>(out), out_stride);
    else
      dequant_rows_kernel<F><<<grid_for(n, 128), 128, 0, s>>>(w, row_bytes, rows, chunks,
                                                              static_cast<float*>(out), out_stride);
  });
  if (!ok) throw_error(std::string("cuda dequantize: no decoder for weight type ") + type_name(t));
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

void get_rows(GgmlType t, const uint8_t* table, size_t row_bytes, int64_t cols,
              const IndexArray& ids, Mat out, cudaStream_t s) {
  if (ids.count == 0) return;
  if (ids.count > 65535) throw_error("cuda get_rows: more than 65535 rows in one call");
  const bool ok = with_format(t, [&](auto f) {
    using F = decltype(f);
    const dim3 grid(grid_for(cols / 32, 128), (unsigned)ids.count);
    get_rows_quant_kernel<F><<<grid, 128, 0, s>>>(table, row_bytes, cols / 32, ids, out);
  });
  if (!ok) {
    const dim3 grid(grid_for(cols, 256), (unsigned)ids.count);
    switch (t) {
      case GgmlType::F32:
        get_rows_float_kernel<GgmlType::F32><<<grid, 256, 0, s>>>(table, row_bytes, cols, ids, out);
        break;
      case GgmlType::F16:
        get_rows_float_kernel<GgmlType::F16><<<grid, 256, 0, s>>>(table, row_bytes, cols, ids, out);
        break;
      case GgmlType::BF16:
        get_rows_float_kernel<GgmlType::BF16>
            <<<grid, 256, 0, s>>>(table, row_bytes, cols, ids, out);
        break;
      default: throw_error(std::string("cuda get_rows: no decoder for type ") + type_name(t));
    }
  }
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

void to_16bit(CMat x, void* out, bool bf16, cudaStream_t s) {
  const int64_t n = x.rows * x.cols;
  if (n == 0) return;
  to_16bit_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, out, bf16);
  MOEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace moeflow::cuda
