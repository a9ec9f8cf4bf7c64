#pragma once
// What one layer of a model computes, as data: the architecture files (model/arch/) fill one
// LayerSpec per layer from the GGUF metadata, and the forward pass (model/forward.cpp) runs any
// combination of them. A new architecture is a new combination, or a new option here with its
// op in the backend.
#include <cstdint>

#include "backend/backend.h"

namespace moeflow {

enum class NormKind : uint8_t {
  Rms,    // RMSNorm with a weight
  Layer,  // LayerNorm with a weight and a bias
};

enum class QkNorm : uint8_t {
  None,
  PerHead,  // RMSNorm over each head's slice of q and k (qwen3moe)
  Full,     // RMSNorm over the whole q / k projection (olmoe)
};

struct AttentionSpec {
  QkNorm qk_norm = QkNorm::None;
  RopeParams rope;
  // Heads, sizes, scale and window; the sink logits (when `sinks`) come from the layer's weights.
  AttentionParams params;
  bool sinks = false;
};

enum class FfnKind : uint8_t { Dense, Moe };

struct MoeSpec {
  RoutingSpec routing;
  GluParams act;  // the experts' gated activation
  // Shared experts beside the routed ones, always on; the gate (qwen2moe: sigmoid of one logit
  // per token) scales their output, GateFn::None adds it as is (DeepSeek).
  bool shared_expert = false;
  GateFn shared_gate = GateFn::None;
};

struct LayerSpec {
  NormKind norm = NormKind::Rms;
  AttentionSpec attn;
  FfnKind ffn = FfnKind::Dense;
  GluParams dense_act;  // the dense FFN's gated activation
  MoeSpec moe;
};

}  // namespace moeflow
