// "qwen3moe": Qwen3-30B-A3B, Qwen3-235B-A22B. NeoX RoPE, RMSNorm over each head of q and k.
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    ld.norms(il, L, NormKind::Rms);
    ld.attention(il, L, {.qk_norm = QkNorm::PerHead});
    s.attn.qk_norm = QkNorm::PerHead;
    ld.moe(il, L, {});
    s.ffn = FfnKind::Moe;
  }
}

}  // namespace

const ArchDef& arch_qwen3moe() {
  static const ArchDef d{"qwen3moe", "Qwen3-30B-A3B, Qwen3-235B-A22B", false, true, nullptr,
                         &build};
  return d;
}

}  // namespace moeflow
