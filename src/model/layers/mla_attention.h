#pragma once
// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) over a cache that holds, per position,
// only the shared rotary key and the compressed latent: [k_rope | latent] (rope + kv_lora_rank
// floats instead of n_head * (k + v) head rows). Computed in the absorbed form: each head's
// non-rotary query is multiplied into latent space by its attn_k_b block, so attention runs as
// one kv head of rope + kv_lora_rank dims whose values are the latent columns of the same rows;
// each head's output latent is then decompressed by its attn_v_b block before attn_output.
// Written against the Backend ops only (per-head products are matmuls on strided views).
#include "backend/backend.h"
#include "model/kv_cache.h"
#include "model/layer_spec.h"
#include "model/weights.h"

namespace moeflow {

struct MlaScratch {
  explicit MlaScratch(Backend& be) : qa(be), q(be), kv(be), qf(be), att(be), attv(be) {}
  BackendScratch qa, q, kv, qf, att, attv;
};

// out[n][n_embd] = attention of the n rows of xn (normalised input) at positions pos0..;
// appends the rows' [k_rope | latent] to layer `layer` of `kv` (k_dim = rope + kv_lora_rank).
void mla_attention(Backend& be, const LayerWeights& L, const AttentionSpec& spec, float norm_eps,
                   const TensorView& xn, KvCache& kv, int layer, int64_t pos0, TensorView out,
                   MlaScratch& scratch);

}  // namespace moeflow
