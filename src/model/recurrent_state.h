#pragma once
// The per-sequence state of recurrent layers (gated DeltaNet), beside the KV cache: for each
// such layer the convolution's last d_conv-1 inputs ([d_conv-1][channels]) and the delta rule's
// state ([n_v_heads*head_k][head_v]), float32 in the backend's memory. Unlike KV cache rows it
// summarises the whole prefix: a sequence can start over (clear) but cannot rewind to an earlier
// position by itself, which is why ForwardContext::can_rewind() is false for models that have
// it; it goes back only to a copy taken there (model/state_snapshots.h).
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "model/layer_spec.h"

namespace moeflow {

class RecurrentState {
 public:
  RecurrentState() = default;
  // One state per layer whose spec is GatedDeltaNet (none for the others).
  RecurrentState(const std::vector<LayerSpec>& specs, Allocator& alloc);

  bool empty() const { return bytes_ == 0; }
  uint64_t bytes() const { return bytes_; }
  bool has(int layer) const {
    return layer >= 0 && layer < (int)layers_.size() && (bool)layers_[layer].conv;
  }
  // Layer `layer`'s convolution state [d_conv-1][channels] and delta-rule state
  // [n_v_heads*head_k][head_v] (the layer must have one: has(layer)).
  TensorView conv(int layer) const;
  TensorView ssm(int layer) const;
  // Zeros every state (a new sequence), through `be` so device memory works too.
  void clear(Backend& be);
  // Copies every state of `src` (made from the same specs) into this one, through `be`.
  void copy_from(const RecurrentState& src, Backend& be);

 private:
  struct Layer {
    Buffer conv, ssm;
    int64_t conv_rows = 0, conv_cols = 0, ssm_rows = 0, ssm_cols = 0;
  };
  std::vector<Layer> layers_;
  uint64_t bytes_ = 0;
  std::vector<float> zeros_;  // host zeros as large as the largest state
};

}  // namespace moeflow
