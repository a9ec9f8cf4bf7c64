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

enum class AttentionKind : uint8_t {
  Gqa,            // q/k/v projections, a K and a V row per kv head in the cache (layers/attention)
  Mla,            // multi-head latent attention: the cache holds one compressed row per position
                  // (layers/mla_attention)
  GatedDeltaNet,  // linear attention with a recurrent state instead of cache rows
                  // (layers/delta_net, model/recurrent_state.h)
};

// Sizes of a gated DeltaNet layer (Qwen3-Next, Qwen3.5): q/k of n_k_heads heads of head_k dims
// and v/z of n_v_heads heads of head_v dims come from one projection each (attn_qkv, attn_gate),
// pass a causal depthwise convolution of d_conv taps (q, k, v only), and the delta rule keeps a
// [head_k][head_v] state per value head (backend.h DeltaNetParams).
struct DeltaNetSpec {
  int n_k_heads = 0, n_v_heads = 0;
  int64_t head_k = 0, head_v = 0;
  int64_t d_conv = 0;
  bool tiled = false;     // value head h reads key head h % n_k_heads (else h / (n_v / n_k))
  bool fused_ba = false;  // qwen3next: ssm_ba holds [beta | alpha] per key head
  int64_t conv_channels() const { return 2 * n_k_heads * head_k + n_v_heads * head_v; }
  int64_t state_floats() const { return (int64_t)n_v_heads * head_k * head_v; }
};

// Sizes of multi-head latent attention (DeepSeek-V2/V3). Each head's query is [nope | rope];
// keys and values are decompressed from a shared kv_lora_rank latent, the rope part of the key
// is shared by all heads. Computed "absorbed": the cache row is [k_rope | latent], attention
// runs as one kv head of rope + kv_lora_rank dims whose values are the latent columns.
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: attn_q, else attn_q_a -> RMSNorm -> attn_q_b
  int64_t kv_lora_rank = 0;
  int64_t nope = 0;        // per-head q/k dims without position
  int64_t rope = 0;        // per-head q / shared k dims with RoPE
  int64_t head_dim_v = 0;  // per-head value dims (attn_v_b rows)
};

struct AttentionSpec {
  AttentionKind kind = AttentionKind::Gqa;
  MlaSpec mla;         // kind == Mla
  DeltaNetSpec delta;  // kind == GatedDeltaNet
  QkNorm qk_norm = QkNorm::None;
  // Qwen3-Next's output gate: attn_q is twice as wide, each head [q | gate]; the attention
  // output is multiplied by sigmoid(gate) before attn_output.
  bool output_gate = false;
  RopeParams rope;
  // Heads, sizes, scale and window; the sink logits (when `sinks`) come from the layer's weights.
  AttentionParams params;
  bool sinks = false;
  // Gemma 4: a layer without a value projection takes the key projection's output (before the
  // key norm and RoPE) as its values (attention_k_eq_v), and values are RMS-normalised per head
  // without a weight before they are cached.
  bool v_from_k = false;
  bool v_norm = false;
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

// Floats per position and layer the KV cache keeps for a layer of this spec: K and V rows
// (GQA), or one row of [k_rope | latent] whose latent columns are also the values (MLA, v = 0).
struct KvWidths {
  int64_t k = 0, v = 0;
};
inline KvWidths kv_widths(const AttentionSpec& a) {
  if (a.kind == AttentionKind::GatedDeltaNet) return {0, 0};  // a recurrent state, no rows
  if (a.kind == AttentionKind::Mla) return {a.mla.rope + a.mla.kv_lora_rank, 0};
  return {(int64_t)a.params.n_head_kv * a.params.head_dim,
          (int64_t)a.params.n_head_kv * a.params.head_dim_v};
}

struct LayerSpec {
  NormKind norm = NormKind::Rms;
  AttentionSpec attn;
  FfnKind ffn = FfnKind::Dense;
  GluParams dense_act;  // the dense FFN's gated activation
  MoeSpec moe;
  // Gemma: RMSNorm of the attention output (attn_post_norm) and of the FFN output
  // (ffn_post_norm) before each is added to the residual stream.
  bool post_norms = false;
  // Gemma 4's MoE layers: a dense FFN (ffn_norm -> GLU -> ffn_post_norm_1) beside the MoE block
  // (experts on ffn_pre_norm_2 of the residual, the router on router_norm of it, ->
  // ffn_post_norm_2), the two outputs summed.
  bool dense_beside_moe = false;
  // The layer's output (the residual stream after it) times this (Gemma 4's layer scalar).
  float out_scale = 1.0f;
};

}  // namespace moeflow
