#pragma once
// Float32 key/value cache, one block per layer: position-major, so appending a token writes one
// contiguous row per layer and attention reads rows 0..pos in order. Each layer's rows are as
// wide as that layer needs (model/layer_spec.h kv_widths: its own kv heads x head size), and a
// layer without attention rows (a gated DeltaNet layer, whose state is model/recurrent_state.h)
// takes no memory at all: a hybrid with three recurrent layers per attention layer holds a
// quarter of what a cache sized by its widest layer would. v width 0 keeps no V rows
// (multi-head latent attention reads its values from columns of the K rows). The memory comes
// from an Allocator (host RAM for the CPU backend, VRAM for a device backend): one allocation for
// all K blocks and one for all V blocks.
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"
#include "model/layer_spec.h"

namespace moeflow {

class KvCache {
 public:
  KvCache() = default;
  // One layer per entry of `widths` (floats per position: {0, 0} for a layer without rows).
  KvCache(const std::vector<KvWidths>& widths, int64_t n_ctx,
          Allocator& alloc = HostAllocator::instance());
  // Every layer as wide as every other (k_dim > 0).
  KvCache(int n_layer, int64_t n_ctx, int64_t k_dim, int64_t v_dim,
          Allocator& alloc = HostAllocator::instance());

  // Bytes a cache of these layers takes for n_ctx positions (what the constructor allocates).
  static uint64_t bytes_for(const std::vector<KvWidths>& widths, int64_t n_ctx);

  int64_t n_ctx() const { return n_ctx_; }
  int n_layer() const { return (int)layers_.size(); }
  // Floats per position of layer `layer`'s K / V rows (0: the layer keeps none).
  int64_t k_dim(int layer) const { return layers_.at(layer).k; }
  int64_t v_dim(int layer) const { return layers_.at(layer).v; }
  bool has(int layer) const { return layer >= 0 && layer < n_layer() && layers_[layer].k > 0; }
  uint64_t bytes() const { return k_.size() + v_.size(); }
  MemSpace space() const { return k_.space(); }

  float* k(int layer, int64_t pos) { return k_.as<float>() + offset(layer, pos, true); }
  float* v(int layer, int64_t pos) { return v_.as<float>() + offset(layer, pos, false); }
  const float* k(int layer, int64_t pos) const { return k_.as<float>() + offset(layer, pos, true); }
  const float* v(int layer, int64_t pos) const {
    return v_.as<float>() + offset(layer, pos, false);
  }
  // Writes zeros over the whole cache (host memory only), so its pages are resident now.
  void prefault();
  // One layer's keys / values as [n_ctx][k_dim] / [n_ctx][v_dim] views (row = position);
  // v_view is empty when the layer's v width is 0. With `cols` (> 0, <= the width) the leading
  // cols of each row. A layer without rows is an error naming it.
  TensorView k_view(int layer, int64_t cols = 0) const;
  TensorView v_view(int layer, int64_t cols = 0) const;

 private:
  struct Layer {
    int64_t k = 0, v = 0;          // floats per position
    int64_t k_off = 0, v_off = 0;  // where the layer's block starts, in floats
  };
  int64_t offset(int layer, int64_t pos, bool key) const {
    const Layer& L = layers_[layer];
    return key ? L.k_off + pos * L.k : L.v_off + pos * L.v;
  }
  std::vector<Layer> layers_;
  int64_t n_ctx_ = 0;
  Buffer k_, v_;
};

}  // namespace moeflow
