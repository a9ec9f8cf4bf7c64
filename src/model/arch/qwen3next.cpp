// "qwen3next": Qwen3-Next-80B-A3B. Gated DeltaNet layers with three of four layers, gated full
// attention on the others, a sigmoid-gated shared expert (model/qwen_hybrid.h).
#include "model/arch/arch.h"
#include "model/qwen_hybrid.h"

namespace moeflow {
namespace {

void load_hparams(const GgufFile& f, HParams& hp) {
  load_qwen_hybrid_hparams(f, hp, QwenHybrid::Next);
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  build_qwen_hybrid(ld, hp, w, specs, QwenHybrid::Next);
}

}  // namespace

const ArchDef& arch_qwen3next() {
  static const ArchDef d{"qwen3next", "Qwen3-Next-80B-A3B", false, true, &load_hparams, &build};
  return d;
}

}  // namespace moeflow
