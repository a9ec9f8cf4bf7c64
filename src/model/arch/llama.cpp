// "llama": Mixtral (expert_count > 0) and dense Llama. The GGUF converter has already permuted
// the Q/K rows for interleaved-pair RoPE. A MoE model may mix in dense layers (no router).
#include "gguf/tensor_names.h"
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::Normal);
    ld.norms(il, L, NormKind::Rms);
    ld.attention(il, L, {});
    if (hp.n_expert > 0 && ld.has(layer_tensor_name(il, "ffn_gate_inp.weight"))) {
      ld.moe(il, L, {});
      s.ffn = FfnKind::Moe;
    } else {
      ld.dense_ffn(il, L);
    }
  }
}

}  // namespace

const ArchDef& arch_llama() {
  static const ArchDef d{"llama",
                         "Mixtral 8x7B/8x22B, dense Llama",
                         /*dense_allowed=*/true,
                         /*norm_topk_default=*/true,
                         nullptr,
                         &build};
  return d;
}

}  // namespace moeflow
