// matmul on the GPU. Up to kMaxVecTokens tokens (decode, and the experts of a prefill chunk
// that few tokens route to): the fused kernels of k_matvec.cu, block-quantized weights against
// activations quantized to 8 bits per 32 (as llama.cpp's MMVQ path), float weights against
// float activations. More tokens: tensor-core GEMMs through cuBLAS, the weights dequantized to
// fp16 tiles of at most kTileBytes (the quant arithmetic of block_decode.h, then one rounding
// to fp16) and the activations rounded to the weight's 16-bit type; float32 weights take a
// full float32 GEMM. Outputs are float32 in every case.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace moeflow::cuda {
namespace {

constexpr size_t kTileBytes = 64ull << 20;

bool is_float(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

}  // namespace

void CudaBackend::matmul(const TensorView& w, const TensorView& x, TensorView y) {
  if (w.space == MemSpace::Host)
    fail(
        "cuda backend: matmul got its weight in pageable host memory (adopt it, or serve the "
        "experts from VRAM)");
  if (x.space == MemSpace::Host || y.space == MemSpace::Host)
    fail("cuda backend: matmul got its input or output in pageable host memory");
  if (x.type != GgmlType::F32 || y.type != GgmlType::F32)
    fail("cuda backend: matmul needs float32 input and output");
  const int64_t n = x.rows();
  if (x.cols() != w.cols() || y.cols() != w.rows() || y.rows() != n)
    fail("cuda backend: matmul shapes do not match: weight {}x{}, input {}x{}, output {}x{}",
         w.rows(), w.cols(), n, x.cols(), y.rows(), y.cols());
  if (!w.rows_contiguous()) fail("cuda backend: matmul needs the weight's rows back to back");
  if (!type_traits(w.type).supported)
    fail("cuda backend: matmul cannot read weight type {}", type_name(w.type));
  if (n == 0 || w.rows() == 0) return;
  const size_t rb = row_bytes(w.type, w.cols());
  const uint64_t key = mix_key(
      mix_key(mix_key(2, (uint64_t)w.type), (uint64_t)w.rows() * 1000003u + (uint64_t)w.cols()),
      (uint64_t)n);
  if (n > kMaxVecTokens) {
    gemm(w, x, y);
    return;
  }
  if (is_float(w.type)) {
    op(true, key,
       [&] { matvec_float(w.type, w.data, rb, w.rows(), w.cols(), cmat(x), mat(y), stream_); });
    return;
  }
  // Activation quants [n][cols] int8, then their scales [n][cols/32] float.
  const size_t qbytes = ((size_t)n * x.cols() + 255) & ~size_t(255);
  uint8_t* buf =
      static_cast<uint8_t*>(act_.get(alloc_, qbytes + (size_t)n * (x.cols() / 32) * sizeof(float)));
  int8_t* q = reinterpret_cast<int8_t*>(buf);
  float* d = reinterpret_cast<float*>(buf + qbytes);
  op(true, key, [&] {
    quantize_activations(cmat(x), q, d, stream_);
    matvec_quant(w.type, w.data, rb, w.rows(), w.cols(), q, d, (int)n, mat(y), stream_);
  });
}

void CudaBackend::gemm(const TensorView& w, const TensorView& x, TensorView y) {
  const int64_t n = x.rows(), rows = w.rows(), cols = w.cols();
  const int64_t ldy = (int64_t)(y.row_stride() / sizeof(float)),
                ldx = (int64_t)(x.row_stride() / sizeof(float));
  const float one = 1.0f, zero = 0.0f;
  // Row-major Y[n][rows] = X[n][cols] W^T. cuBLAS is column-major: W's bytes are a cols x rows
  // matrix (lda = cols) used transposed, X's a cols x n matrix (ldb = X's row stride), Y's a
  // rows x n matrix (ldc = Y's row stride).
  auto gemm_ex = [&](const void* a, cudaDataType ta, int64_t m, const void* b, cudaDataType tb,
                     int64_t ldb, float* c) {
    MOEFLOW_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)cols,
                                      &one, a, ta, (int)cols, b, tb, (int)ldb, &zero, c, CUDA_R_32F,
                                      (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  if (w.type == GgmlType::F32) {
    op(false, 0,
       [&] { gemm_ex(w.data, CUDA_R_32F, rows, x.data, CUDA_R_32F, ldx, y.as<float>()); });
    return;
  }
  const bool bf16 = w.type == GgmlType::BF16;
  void* x16 = x16_.get(alloc_, (size_t)n * cols * 2);
  if (bf16 || w.type == GgmlType::F16) {
    op(false, 0, [&] {
      to_16bit(cmat(x), x16, bf16, stream_);
      gemm_ex(w.data, bf16 ? CUDA_R_16BF : CUDA_R_16F, rows, x16, bf16 ? CUDA_R_16BF : CUDA_R_16F,
              cols, y.as<float>());
    });
    return;
  }
  const size_t rb = row_bytes(w.type, cols);
  const int64_t tile_rows =
      std::clamp<int64_t>((int64_t)(kTileBytes / ((size_t)cols * 2)), 1, rows);
  void* tile = tile_.get(alloc_, (size_t)tile_rows * cols * 2);
  op(false, 0, [&] {
    to_16bit(cmat(x), x16, false, stream_);
    for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
      const int64_t m = std::min(tile_rows, rows - r0);
      dequantize_rows(w.type, w.row(r0), rb, m, cols, tile, cols, true, stream_);
      gemm_ex(tile, CUDA_R_16F, m, x16, CUDA_R_16F, cols, y.as<float>() + r0);
    }
  });
}

}  // namespace moeflow::cuda
