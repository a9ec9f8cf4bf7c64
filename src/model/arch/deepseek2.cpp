// "deepseek2": DeepSeek-V2-Lite, DeepSeek-V2, DeepSeek-V3/R1, Kimi-K2. Multi-head latent
// attention (optional q_lora, rope/nope head split, the cache holding the latent and the rotary
// key), normal (interleaved-pair) RoPE with YaRN, leading dense layers, ungated shared experts,
// routing by softmax (V2) or sigmoid with a selection bias (V3), group-limited top-k,
// optional renormalisation and routed scaling.
#include <cmath>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

void load_hparams(const GgufFile& f, HParams& hp) {
  const std::string p = hp.arch_name + ".";
  hp.n_layer_dense_lead = (int)hparam_count(f, hp, "leading_dense_block_count", 0);
  if (hp.n_layer_dense_lead > hp.n_layer)
    fail("{}: {}leading_dense_block_count = {} exceeds the {} layers", f.path(), p,
         hp.n_layer_dense_lead, hp.n_layer);
  hp.n_expert_shared = (int)hparam_count(f, hp, "expert_shared_count", -1);
  hp.n_ff_shexp = hp.n_ff_exp * hp.n_expert_shared;
  load_moe_routing(f, hp, MoeRouting::Gating::Softmax);
  if (f.get_float(p + "attention.temperature_scale", 0.0) != 0.0)
    fail("{}: {}attention.temperature_scale (Mistral-Large-style query scaling) is not supported",
         f.path(), p);

  MlaDims& m = hp.mla;
  m.kv_lora_rank = hparam_positive(f, hp, "attention.kv_lora_rank");
  m.q_lora_rank = hparam_count(f, hp, "attention.q_lora_rank", 0);
  if (!f.has(p + "rope.dimension_count"))
    fail("{}: missing metadata '{}rope.dimension_count' (the rotary part of each head)", f.path(),
         p);
  // Current converters store the absorbed form's sizes in key_length / value_length and the
  // per-head ones in *_mla, with attn_k_b / attn_v_b; older files have only the per-head sizes
  // and one attn_kv_b (llama.cpp decides by the *_mla keys too).
  m.split_kv_b = f.has(p + "attention.key_length_mla");
  m.head_dim_k = m.split_kv_b ? hparam_positive(f, hp, "attention.key_length_mla") : hp.head_dim;
  m.head_dim_v =
      m.split_kv_b ? hparam_positive(f, hp, "attention.value_length_mla") : hp.head_dim_v;
  if (m.head_dim_k <= hp.n_rot)
    fail("{}: MLA key head size {} leaves no non-rotary dims beside rope.dimension_count {}",
         f.path(), m.head_dim_k, hp.n_rot);
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  const MlaSpec mla{hp.mla.q_lora_rank, hp.mla.kv_lora_rank, hp.mla.head_dim_k - hp.n_rot, hp.n_rot,
                    hp.mla.head_dim_v};
  ld.globals(NormKind::Rms);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::Normal);
    ld.norms(il, L, NormKind::Rms);
    ld.mla_attention(il, L, mla);
    s.attn.kind = AttentionKind::Mla;
    s.attn.mla = mla;
    s.attn.rope.n_rot = mla.rope;
    const float log_mul = hp.rope_scaling.yarn_log_mul;
    // DeepSeek's configs have mscale == mscale_all_dim (llama.cpp assumes so too).
    ld.apply_rope_scaling(s.attn.rope, log_mul != 0.0f ? log_mul : 1.0f);
    // llama.cpp's softmax scale for YaRN: mscale^2 / sqrt(q/k head size), with mscale from the
    // rotation's own attention factor and the stored log multiplier (mscale_all_dim).
    const float ln_inv_scale = std::log(1.0f / s.attn.rope.freq_scale);
    const float attn_factor_org = s.attn.rope.attn_factor * (1.0f + 0.1f * ln_inv_scale);
    const float mscale = attn_factor_org * (1.0f + 0.1f * log_mul * ln_inv_scale);
    AttentionParams& ap = s.attn.params;
    ap.n_head_kv = 1;
    ap.head_dim = mla.rope + mla.kv_lora_rank;
    ap.head_dim_v = mla.kv_lora_rank;
    ap.scale = mscale * mscale / std::sqrt((float)hp.mla.head_dim_k);
    if (il < hp.n_layer_dense_lead) {
      ld.dense_ffn(il, L);
      continue;
    }
    const bool bias = ld.has(layer_tensor_name(il, "exp_probs_b.bias"));
    ld.moe(il, L,
           {.shared = hp.n_expert_shared > 0, .n_ff_shexp = hp.n_ff_shexp, .selection_bias = bias});
    s.ffn = FfnKind::Moe;
    s.moe.shared_expert = hp.n_expert_shared > 0;
    s.moe.shared_gate = GateFn::None;
    ld.apply_routing(s.moe.routing);
    // Group score: V2's group-limited greedy takes the best expert of each group (softmax
    // scores), V3's noaux_tc the sum of the best two (sigmoid + bias). llama.cpp sums two for
    // both; transformers and the released V2 code take the maximum for V2.
    s.moe.routing.group_top = hp.routing.gating == MoeRouting::Gating::Softmax ? 1 : 2;
  }
}

}  // namespace

const ArchDef& arch_deepseek2() {
  static const ArchDef d{"deepseek2",
                         "DeepSeek-V2-Lite, DeepSeek-V2, DeepSeek-V3/R1, Kimi-K2",
                         /*dense_allowed=*/false,
                         /*norm_topk_default=*/false,
                         &load_hparams,
                         &build};
  return d;
}

}  // namespace moeflow
