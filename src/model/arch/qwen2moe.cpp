// "qwen2moe": Qwen1.5-MoE, Qwen2-MoE. NeoX RoPE, biases on q/k/v, a shared expert scaled by
// sigmoid(ffn_gate_inp_shexp . x) beside the routed ones; top-k weights not renormalised.
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

void load_hparams(const GgufFile& f, HParams& hp) {
  hp.n_ff_shexp = hparam_positive(f, hp, "expert_shared_feed_forward_length");
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    ld.norms(il, L, NormKind::Rms);
    ld.attention(il, L, {.qkv_bias = true});
    ld.moe(il, L, {.shared = true, .shared_gate = true, .n_ff_shexp = hp.n_ff_shexp});
    s.ffn = FfnKind::Moe;
    s.moe.shared_expert = true;
    s.moe.shared_gate = GateFn::Sigmoid;
  }
}

}  // namespace

const ArchDef& arch_qwen2moe() {
  static const ArchDef d{
      "qwen2moe", "Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B", false, false, &load_hparams, &build};
  return d;
}

}  // namespace moeflow
