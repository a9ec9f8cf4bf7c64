#pragma once
// Grouped-query attention with RoPE over the KV cache, the attention every supported
// architecture uses so far: q/k/v projections (+ biases), optional RMSNorm of q and k (per
// head or whole), RoPE, append k/v at the step's positions, causal attention (sliding window
// and sinks per the spec), the output gate (sigmoid of a second half of each q head, Qwen3-Next),
// output projection (+ bias).
#include "backend/backend.h"
#include "model/kv_cache.h"
#include "model/layer_spec.h"
#include "model/weights.h"

namespace moeflow {

struct AttentionScratch {
  explicit AttentionScratch(Backend& be) : q(be), k(be), v(be), att(be), qg(be) {}
  BackendScratch q, k, v, att;
  BackendScratch qg;  // [q | gate] per head (AttentionSpec::output_gate)
};

// out[n][n_embd] = attention of the n rows of xn (normalised input) at positions pos0..
// rope_freqs: the RoPE frequency divisors to use (one of the layer's, chosen by the caller for
// the context length), or empty.
void gqa_attention(Backend& be, const LayerWeights& L, const AttentionSpec& spec, float norm_eps,
                   const TensorView& xn, KvCache& kv, int layer, int64_t pos0,
                   const TensorView& rope_freqs, TensorView out, AttentionScratch& scratch);

}  // namespace moeflow
