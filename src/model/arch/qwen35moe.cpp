// "qwen35moe": Qwen3.5 / Qwen3.6 MoE (Qwen3.6-35B-A3B, Qwen3.5-122B-A10B, -397B-A17B), text
// only. Qwen3-Next's layers with separate beta/alpha projections, value heads in the tiled order
// llama.cpp's converter writes, and IMRoPE sections that are plain RoPE for text positions
// (model/qwen_hybrid.h).
#include "model/arch/arch.h"
#include "model/qwen_hybrid.h"

namespace moeflow {
namespace {

void load_hparams(const GgufFile& f, HParams& hp) {
  load_qwen_hybrid_hparams(f, hp, QwenHybrid::V35);
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  build_qwen_hybrid(ld, hp, w, specs, QwenHybrid::V35);
}

}  // namespace

const ArchDef& arch_qwen35moe() {
  static const ArchDef d{"qwen35moe",   "Qwen3.6-35B-A3B, Qwen3.5-122B-A10B, Qwen3.5-397B-A17B",
                         false,         true,
                         &load_hparams, &build};
  return d;
}

}  // namespace moeflow
