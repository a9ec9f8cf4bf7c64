#pragma once
// What Qwen3-Next ("qwen3next") and Qwen3.5/3.6 MoE ("qwen35moe") share: three gated DeltaNet
// layers per full-attention layer (layer_spec.h DeltaNetSpec), full attention with an output
// gate, per-head q/k RMSNorm and partial NeoX RoPE, and a MoE FFN with a shared expert scaled by
// sigmoid(ffn_gate_inp_shexp . x). The architecture files (model/arch/qwen3next.cpp,
// qwen35moe.cpp) differ only in the variant.
#include <vector>

#include "model/hparams.h"
#include "model/layer_spec.h"

namespace moeflow {

class GgufFile;
class ModelLoader;
struct ModelWeights;

enum class QwenHybrid {
  Next,  // qwen3next: ssm_ba fused, value heads grouped by key head
  V35,   // qwen35moe: ssm_beta + ssm_alpha, value heads tiled (the converter reorders them),
         // IMRoPE sections (plain RoPE for text positions)
};

void load_qwen_hybrid_hparams(const GgufFile& f, HParams& hp, QwenHybrid v);
void build_qwen_hybrid(ModelLoader& ld, const HParams& hp, ModelWeights& w,
                       std::vector<LayerSpec>& specs, QwenHybrid v);

}  // namespace moeflow
