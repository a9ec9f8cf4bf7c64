#pragma once
// A view of a tensor somewhere in memory: element type, shape, byte strides and the memory
// space it lives in. Views never own memory; whoever made the buffer keeps it alive.
//
// Dimensions follow GGUF/ggml order: ne[0] is the innermost (contiguous) dimension, so a weight
// matrix of `rows` rows of `cols` elements has ne = {cols, rows} and nb[1] = the row's bytes.
// For block-quantized types ne[0] is a multiple of the block size and nb[0] is meaningless
// (rows are addressed as a whole); float views have nb[0] = sizeof(element).
//
// The memory space says which processor may dereference `data`: a backend refuses a view it
// cannot read (a CUDA kernel given a pageable host pointer, the CPU given device memory).
#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace moeflow {

enum class MemSpace : uint8_t {
  Host = 0,        // pageable host memory (mmap, heap)
  PinnedHost = 1,  // page-locked host memory: the CPU reads it, a GPU copies from it by DMA
  Device = 2,      // accelerator memory
};

const char* mem_space_name(MemSpace s);

struct TensorView {
  static constexpr int kMaxDims = 4;

  uint8_t* data = nullptr;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  size_t nb[kMaxDims] = {0, 0, 0, 0};
  MemSpace space = MemSpace::Host;

  explicit operator bool() const { return data != nullptr; }
  // Matrix reading of the first two dimensions.
  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1]; }
  size_t row_stride() const { return nb[1]; }
  uint8_t* row(int64_t r) const { return data + (size_t)r * nb[1]; }
  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Bytes from the first to one past the last element, assuming dims >= 1 are outermost.
  uint64_t nbytes() const;
  // Rows are packed back to back (nb[1] == the bytes of one row of ne[0] elements).
  bool rows_contiguous() const;
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data);
  }

  // Rows [r0, r0 + n) of a matrix view.
  TensorView slice_rows(int64_t r0, int64_t n) const;
};

// A dense matrix of `rows` rows of `cols` elements of `type`, rows back to back.
TensorView matrix_view(const void* data, GgmlType type, int64_t cols, int64_t rows,
                       MemSpace space = MemSpace::Host);
// The same with an explicit row stride in bytes (a sub-block of a wider matrix).
TensorView strided_matrix_view(const void* data, GgmlType type, int64_t cols, int64_t rows,
                               size_t row_stride, MemSpace space = MemSpace::Host);
// A float32 matrix [rows][cols], rows back to back.
TensorView f32_view(const float* data, int64_t cols, int64_t rows = 1,
                    MemSpace space = MemSpace::Host);
// Columns [c0, c0 + cols) of every row of the float32 view v (v's row stride and memory space).
TensorView f32_columns(const TensorView& v, int64_t c0, int64_t cols);

}  // namespace moeflow
