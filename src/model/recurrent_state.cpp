#include "model/recurrent_state.h"

#include <algorithm>

#include "core/error.h"

namespace moeflow {

RecurrentState::RecurrentState(const std::vector<LayerSpec>& specs, Allocator& alloc) {
  layers_.resize(specs.size());
  size_t largest = 0;
  for (size_t il = 0; il < specs.size(); ++il) {
    const AttentionSpec& a = specs[il].attn;
    if (a.kind != AttentionKind::GatedDeltaNet) continue;
    const DeltaNetSpec& d = a.delta;
    if (d.d_conv < 2 || d.n_v_heads <= 0 || d.head_k <= 0 || d.head_v <= 0)
      fail("recurrent state: layer {} has an invalid DeltaNet shape", il);
    Layer& L = layers_[il];
    L.conv_rows = d.d_conv - 1;
    L.conv_cols = d.conv_channels();
    L.ssm_rows = (int64_t)d.n_v_heads * d.head_k;
    L.ssm_cols = d.head_v;
    const size_t cb = (size_t)(L.conv_rows * L.conv_cols) * sizeof(float);
    const size_t sb = (size_t)(L.ssm_rows * L.ssm_cols) * sizeof(float);
    L.conv = alloc.allocate(cb);
    L.ssm = alloc.allocate(sb);
    bytes_ += cb + sb;
    largest = std::max({largest, cb, sb});
  }
  zeros_.assign(largest / sizeof(float), 0.0f);
}

TensorView RecurrentState::conv(int layer) const {
  if (!has(layer)) fail("recurrent state: layer {} is not a recurrent layer", layer);
  const Layer& L = layers_[layer];
  return f32_view(L.conv.as<float>(), L.conv_cols, L.conv_rows, L.conv.space());
}

TensorView RecurrentState::ssm(int layer) const {
  if (!has(layer)) fail("recurrent state: layer {} is not a recurrent layer", layer);
  const Layer& L = layers_[layer];
  return f32_view(L.ssm.as<float>(), L.ssm_cols, L.ssm_rows, L.ssm.space());
}

void RecurrentState::clear(Backend& be) {
  for (int il = 0; il < (int)layers_.size(); ++il) {
    if (!has(il)) continue;
    const Layer& L = layers_[il];
    be.copy(conv(il), f32_view(zeros_.data(), L.conv_cols, L.conv_rows));
    be.copy(ssm(il), f32_view(zeros_.data(), L.ssm_cols, L.ssm_rows));
  }
}

void RecurrentState::copy_from(const RecurrentState& src, Backend& be) {
  if (src.layers_.size() != layers_.size() || src.bytes_ != bytes_)
    fail("recurrent state: a copy between states of different shapes");
  for (int il = 0; il < (int)layers_.size(); ++il) {
    if (!has(il)) continue;
    be.copy(conv(il), src.conv(il));
    be.copy(ssm(il), src.ssm(il));
  }
}

}  // namespace moeflow
