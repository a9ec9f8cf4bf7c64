// "olmoe": OLMoE-1B-7B. NeoX RoPE, RMSNorm over the whole q and k projections.
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
    ld.attention(il, L, {.qk_norm = QkNorm::Full});
    s.attn.qk_norm = QkNorm::Full;
    ld.moe(il, L, {});
    s.ffn = FfnKind::Moe;
  }
}

}  // namespace

const ArchDef& arch_olmoe() {
  static const ArchDef d{"olmoe", "OLMoE-1B-7B", false, false, nullptr, &build};
  return d;
}

}  // namespace moeflow
