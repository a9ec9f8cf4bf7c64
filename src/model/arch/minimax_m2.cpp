// "minimax-m2": MiniMax-M2. GQA with partial NeoX RoPE (rope.dimension_count of each head), RMSNorm
// over the whole q and k projections (one weight of n_head*head_dim, not per head), every layer
// MoE: SwiGLU experts, no shared expert, sigmoid routing with a selection bias (exp_probs_b) and
// the top-k weights always renormalised.
//
// llama.cpp's graph for this architecture hard-codes the renormalisation and never reads
// expert_weights_scale or any shared-expert or dense-layer key, and transformers' MiniMaxM2
// has none of them either: a file that asks for one of those variants is refused by name
// rather than computed as something neither reference checks.
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

void load_hparams(const GgufFile& f, HParams& hp) {
  const std::string p = hp.arch_name + ".";
  load_moe_routing(f, hp, MoeRouting::Gating::Sigmoid);
  if (hp.routing.gating != MoeRouting::Gating::Sigmoid)
    fail("{}: {}expert_gating_func = {} is not supported (MiniMax-M2 routes by sigmoid, 2)",
         f.path(), p, (int)hp.routing.gating);
  if (hp.routing.weights_scale != 1.0f)
    fail(
        "{}: {}expert_weights_scale = {} is not supported (MiniMax-M2 does not scale the routed "
        "weights)",
        f.path(), p, hp.routing.weights_scale);
  if (hp.routing.n_group > 1)
    fail("{}: {}expert_group_count = {} is not supported (MiniMax-M2 has no expert groups)",
         f.path(), p, hp.routing.n_group);
  if (!hp.norm_topk)
    fail(
        "{}: {}expert_weights_norm = false is not supported (MiniMax-M2 renormalises the top-k "
        "weights)",
        f.path(), p);
  if (hparam_count(f, hp, "expert_shared_count", 0) > 0)
    fail("{}: {}expert_shared_count is not supported (MiniMax-M2 has no shared expert)", f.path(),
         p);
  if (hparam_count(f, hp, "leading_dense_block_count", 0) > 0)
    fail("{}: {}leading_dense_block_count is not supported (every MiniMax-M2 layer is MoE)",
         f.path(), p);
  // The released model has no RoPE scaling; scaled partial RoPE is checked against no reference.
  if (hp.rope_scaling.type != RopeScaling::Type::None)
    fail("{}: {}rope.scaling.type (RoPE scaling) is not supported for minimax-m2", f.path(), p);
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);  // n_rot from the file
    ld.norms(il, L, NormKind::Rms);
    ld.attention(il, L, {.qk_norm = QkNorm::Full});
    s.attn.qk_norm = QkNorm::Full;
    ld.moe(il, L, {.selection_bias = true});
    s.ffn = FfnKind::Moe;
    ld.apply_routing(s.moe.routing);
  }
}

}  // namespace

const ArchDef& arch_minimax_m2() {
  static const ArchDef d{"minimax-m2",
                         "MiniMax-M2",
                         /*dense_allowed=*/false,
                         /*norm_topk_default=*/true,
                         &load_hparams,
                         &build};
  return d;
}

}  // namespace moeflow
