#include "model/kv_cache.h"

#include <cstring>

#include "core/error.h"

namespace moeflow {

KvCache::KvCache(int n_layer, int64_t n_ctx, int64_t k_dim, int64_t v_dim, Allocator& alloc)
    : n_layer_(n_layer), n_ctx_(n_ctx), k_dim_(k_dim), v_dim_(v_dim) {
  if (n_ctx <= 0) fail("context size (-c) must be positive, got {}", n_ctx);
  const uint64_t nk = (uint64_t)n_layer * n_ctx * k_dim * sizeof(float);
  const uint64_t nv = (uint64_t)n_layer * n_ctx * v_dim * sizeof(float);
  if (k_dim <= 0 || v_dim < 0) fail("kv cache: row widths k {} / v {} are invalid", k_dim, v_dim);
  k_ = alloc.allocate(nk);
  if (nv) v_ = alloc.allocate(nv);
}

void KvCache::prefault() {
  if (k_.space() == MemSpace::Device) return;
  std::memset(k_.data(), 0, k_.size());
  std::memset(v_.data(), 0, v_.size());
}

namespace {

TensorView rows_of(const float* p, int64_t width, int64_t cols, int64_t n_ctx, MemSpace space) {
  if (cols > width)
    fail("kv cache: a layer asks for rows of {} floats, the cache holds {}", cols, width);
  if (cols <= 0 || cols == width) return f32_view(p, width, n_ctx, space);
  return strided_matrix_view(p, GgmlType::F32, cols, n_ctx, (size_t)width * sizeof(float), space);
}

}  // namespace

TensorView KvCache::k_view(int layer, int64_t cols) const {
  return rows_of(k(layer, 0), k_dim_, cols, n_ctx_, k_.space());
}

TensorView KvCache::v_view(int layer, int64_t cols) const {
  if (v_dim_ == 0) return {};
  return rows_of(v(layer, 0), v_dim_, cols, n_ctx_, v_.space());
}

}  // namespace moeflow
