#pragma once
// Float32 key/value cache for every layer: position-major, so appending a token writes one
// contiguous row per layer and attention reads rows 0..pos in order. The memory comes from an
// Allocator (host RAM for the CPU backend, VRAM for a device backend). The row widths are the
// architecture's (model/layer_spec.h kv_widths): v_dim 0 keeps no V rows (multi-head latent
// attention reads its values from columns of the K rows).
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"

namespace moeflow {

class KvCache {
 public:
  KvCache() = default;
  KvCache(int n_layer, int64_t n_ctx, int64_t k_dim, int64_t v_dim,
          Allocator& alloc = HostAllocator::instance());

  int64_t n_ctx() const { return n_ctx_; }
  int64_t k_dim() const { return k_dim_; }
  int64_t v_dim() const { return v_dim_; }
  int n_layer() const { return n_layer_; }
  uint64_t bytes() const { return k_.size() + v_.size(); }
  MemSpace space() const { return k_.space(); }

  float* k(int layer, int64_t pos) {
    return k_.as<float>() + ((int64_t)layer * n_ctx_ + pos) * k_dim_;
  }
  float* v(int layer, int64_t pos) {
    return v_.as<float>() + ((int64_t)layer * n_ctx_ + pos) * v_dim_;
  }
  const float* k(int layer, int64_t pos) const {
    return k_.as<float>() + ((int64_t)layer * n_ctx_ + pos) * k_dim_;
  }
  const float* v(int layer, int64_t pos) const {
    return v_.as<float>() + ((int64_t)layer * n_ctx_ + pos) * v_dim_;
  }
  // Writes zeros over the whole cache (host memory only), so its pages are resident now.
  void prefault();
  // One layer's keys / values as [n_ctx][k_dim] / [n_ctx][v_dim] views (row = position);
  // v_view is empty when v_dim is 0. With `cols` (> 0, <= the width) the leading cols of each
  // row: a layer whose rows are narrower than the widest layer's (Gemma 4's global layers).
  TensorView k_view(int layer, int64_t cols = 0) const;
  TensorView v_view(int layer, int64_t cols = 0) const;

 private:
  int n_layer_ = 0;
  int64_t n_ctx_ = 0, k_dim_ = 0, v_dim_ = 0;
  Buffer k_, v_;
};

}  // namespace moeflow
