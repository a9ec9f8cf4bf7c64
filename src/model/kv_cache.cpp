#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace moeflow {

uint64_t KvCache::bytes_for(const std::vector<KvWidths>& widths, int64_t n_ctx) {
  uint64_t floats = 0;
  for (const KvWidths& w : widths) floats += (uint64_t)(w.k + w.v) * (uint64_t)n_ctx;
  return floats * sizeof(float);
}

KvCache::KvCache(const std::vector<KvWidths>& widths, int64_t n_ctx, Allocator& alloc)
    : n_ctx_(n_ctx) {
  if (n_ctx <= 0) fail("context size (-c) must be positive, got {}", n_ctx);
  layers_.resize(widths.size());
  int64_t nk = 0, nv = 0;
  for (size_t il = 0; il < widths.size(); ++il) {
    const KvWidths& w = widths[il];
    if (w.k < 0 || w.v < 0 || (w.k == 0 && w.v != 0))
      fail("kv cache: layer {}'s row widths k {} / v {} are invalid", il, w.k, w.v);
    layers_[il] = Layer{w.k, w.v, nk, nv};
    nk += w.k * n_ctx;
    nv += w.v * n_ctx;
  }
  if (nk) k_ = alloc.allocate((size_t)nk * sizeof(float));
  if (nv) v_ = alloc.allocate((size_t)nv * sizeof(float));
}

namespace {

std::vector<KvWidths> uniform_kv_widths(int n_layer, int64_t k_dim, int64_t v_dim) {
  if (k_dim <= 0 || v_dim < 0) fail("kv cache: row widths k {} / v {} are invalid", k_dim, v_dim);
  return std::vector<KvWidths>((size_t)std::max(0, n_layer), KvWidths{k_dim, v_dim});
}

}  // namespace

KvCache::KvCache(int n_layer, int64_t n_ctx, int64_t k_dim, int64_t v_dim, Allocator& alloc)
    : KvCache(uniform_kv_widths(n_layer, k_dim, v_dim), n_ctx, alloc) {}

void KvCache::prefault() {
  if (k_.space() == MemSpace::Device) return;
  if (k_) std::memset(k_.data(), 0, k_.size());
  if (v_) std::memset(v_.data(), 0, v_.size());
}

namespace {

TensorView kv_rows_of(const float* p, int64_t width, int64_t cols, int64_t n_ctx, MemSpace space) {
  if (cols > width)
    fail("kv cache: a layer asks for rows of {} floats, the cache holds {}", cols, width);
  if (cols <= 0 || cols == width) return f32_view(p, width, n_ctx, space);
  return strided_matrix_view(p, GgmlType::F32, cols, n_ctx, (size_t)width * sizeof(float), space);
}

}  // namespace

TensorView KvCache::k_view(int layer, int64_t cols) const {
  if (!has(layer)) fail("kv cache: layer {} keeps no key/value rows", layer);
  return kv_rows_of(k(layer, 0), layers_[layer].k, cols, n_ctx_, k_.space());
}

TensorView KvCache::v_view(int layer, int64_t cols) const {
  if (!has(layer)) fail("kv cache: layer {} keeps no key/value rows", layer);
  if (layers_[layer].v == 0) return {};
  return kv_rows_of(v(layer, 0), layers_[layer].v, cols, n_ctx_, v_.space());
}

}  // namespace moeflow
