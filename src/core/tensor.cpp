#include "core/tensor.h"

#include "core/error.h"

namespace moeflow {

const char* mem_space_name(MemSpace s) {
  switch (s) {
    case MemSpace::Host: return "host";
    case MemSpace::PinnedHost: return "pinned host";
    case MemSpace::Device: return "device";
  }
  return "?";
}

uint64_t TensorView::nbytes() const {
  uint64_t last = row_bytes(type, ne[0]);
  for (int d = 1; d < kMaxDims; ++d)
    if (ne[d] > 1) last += (uint64_t)(ne[d] - 1) * nb[d];
  return last;
}

bool TensorView::rows_contiguous() const { return nb[1] == row_bytes(type, ne[0]); }

TensorView TensorView::slice_rows(int64_t r0, int64_t n) const {
  MOEFLOW_CHECK(r0 >= 0 && n >= 0 && r0 + n <= ne[1], "tensor view: rows [{}, {}) outside 0..{}",
                r0, r0 + n, ne[1]);
  TensorView v = *this;
  v.data = data + (size_t)r0 * nb[1];
  v.ne[1] = n;
  return v;
}

TensorView strided_matrix_view(const void* data, GgmlType type, int64_t cols, int64_t rows,
                               size_t row_stride, MemSpace space) {
  TensorView v;
  v.data = static_cast<uint8_t*>(const_cast<void*>(data));
  v.type = type;
  v.n_dims = 2;
  v.ne[0] = cols;
  v.ne[1] = rows;
  v.nb[0] = type_traits(type).block_size == 1 ? type_traits(type).type_size : 0;
  v.nb[1] = row_stride;
  v.nb[2] = v.nb[3] = row_stride * (size_t)rows;
  v.space = space;
  return v;
}

TensorView matrix_view(const void* data, GgmlType type, int64_t cols, int64_t rows,
                       MemSpace space) {
  return strided_matrix_view(data, type, cols, rows, row_bytes(type, cols), space);
}

TensorView f32_view(const float* data, int64_t cols, int64_t rows, MemSpace space) {
  return matrix_view(data, GgmlType::F32, cols, rows, space);
}

TensorView f32_columns(const TensorView& v, int64_t c0, int64_t cols) {
  return strided_matrix_view(v.data + c0 * sizeof(float), GgmlType::F32, cols, v.rows(),
                             v.row_stride(), v.space);
}

}  // namespace moeflow
