// "glm4moe": GLM-4.5, GLM-4.5-Air. GQA with partial NeoX RoPE (rope.dimension_count of each
// head), q/k/v biases, optional per-head q/k RMSNorm, the pre-FFN norm named
// post_attention_norm, leading dense layers, one ungated shared expert, sigmoid routing with a
// selection bias. The next-token-prediction block stored after the trunk is not run.
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

void load_hparams(const GgufFile& f, HParams& hp) {
  hp.n_layer_dense_lead = (int)hparam_count(f, hp, "leading_dense_block_count", 0);
  if (hp.n_layer_dense_lead > hp.n_layer)
    fail("{}: {}.leading_dense_block_count = {} exceeds the {} layers", f.path(), hp.arch_name,
         hp.n_layer_dense_lead, hp.n_layer);
  hp.n_expert_shared = (int)hparam_count(f, hp, "expert_shared_count", -1);
  hp.n_ff_shexp = hp.n_ff_exp * hp.n_expert_shared;
  load_moe_routing(f, hp, MoeRouting::Gating::Sigmoid);
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    ld.norms(il, L, NormKind::Rms, "post_attention_norm");
    // GLM-4.5 (355B) normalises q and k per head, GLM-4.5-Air does not.
    const QkNorm qk =
        ld.has(layer_tensor_name(il, "attn_q_norm.weight")) ? QkNorm::PerHead : QkNorm::None;
    ld.attention(il, L, {.qk_norm = qk});
    s.attn.qk_norm = qk;
    // attention_bias is a config option: each bias is used when the file has it.
    L.bq = ld.layer_vector(il, "attn_q.bias", hp.q_dim(), false);
    L.bk = ld.layer_vector(il, "attn_k.bias", hp.k_dim(), false);
    L.bv = ld.layer_vector(il, "attn_v.bias", hp.v_dim(), false);
    ld.apply_rope_scaling(s.attn.rope);
    if (il < hp.n_layer_dense_lead) {
      ld.dense_ffn(il, L);
      continue;
    }
    ld.moe(il, L,
           {.shared = hp.n_expert_shared > 0, .n_ff_shexp = hp.n_ff_shexp, .selection_bias = true});
    s.ffn = FfnKind::Moe;
    s.moe.shared_expert = hp.n_expert_shared > 0;
    s.moe.shared_gate = GateFn::None;
    ld.apply_routing(s.moe.routing);
    s.moe.routing.group_top = 2;  // a group scores the sum of its best two (as DeepSeek-V3)
  }
}

}  // namespace

const ArchDef& arch_glm4moe() {
  static const ArchDef d{"glm4moe",
                         "GLM-4.5, GLM-4.5-Air",
                         /*dense_allowed=*/false,
                         /*norm_topk_default=*/false,
                         &load_hparams,
                         &build};
  return d;
}

}  // namespace moeflow
