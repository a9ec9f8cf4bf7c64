#pragma once
// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5/3.6): the layer that keeps a recurrent
// state instead of KV cache rows.
//   qkv = attn_qkv . x, z = attn_gate . x, beta/alpha logits = ssm_beta/ssm_alpha . x (or ssm_ba)
//   qkv = silu(causal depthwise conv1d(qkv)) continuing the layer's conv state
//   o = gated delta rule(q, k, v; decay from alpha, ssm_a, ssm_dt; beta) over the ssm state
//   out = ssm_out . (RMSNorm_per_head(o) * ssm_norm * silu(z))
#include "backend/backend.h"
#include "model/layer_spec.h"
#include "model/recurrent_state.h"
#include "model/weights.h"

namespace moeflow {

struct DeltaNetScratch {
  explicit DeltaNetScratch(Backend& be) : qkv(be), conv(be), z(be), a(be), b(be), ba(be), o(be) {}
  BackendScratch qkv, conv, z, a, b, ba, o;
};

// out[n][n_embd] for the n rows of xn (normalised input), continuing the sequence whose state
// `state` holds for `layer` (updated to include these rows).
void delta_net_attention(Backend& be, const LayerWeights& L, const DeltaNetSpec& spec,
                         float norm_eps, const TensorView& xn, RecurrentState& state, int layer,
                         TensorView out, DeltaNetScratch& scratch);

}  // namespace moeflow
