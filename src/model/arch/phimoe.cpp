// "phimoe": Phi-3.5-MoE. LayerNorm with bias (eps: layer_norm_rms_epsilon, as the model's
// config names it), biases on q/k/v/o and on the output, NeoX RoPE with LongRoPE's per-pair
// factors (rope_factors_short/long.weight; the long ones when the context exceeds
// rope.scaling.original_context_length) and rope.scaling.attn_factor, the sliding window of
// attention.sliding_window on every layer when the file has one, and the SparseMixer top-2
// router as the model computes it at inference (see RoutingSpec).
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

// The router's relative threshold: Phi-3.5-MoE's router_jitter_noise. llama.cpp's converter
// stores no key for it (llama.cpp renormalises a plain softmax top-2 instead).
constexpr float kRouterJitter = 0.01f;

void load_hparams(const GgufFile& f, HParams& hp) {
  // llama.cpp's converter writes the model's sliding_window (131072 for Phi-3.5-MoE); llama.cpp
  // itself ignores it, transformers applies it to every layer.
  hp.n_swa = f.get_int(hp.arch_name + ".attention.sliding_window", 0);
  if (hp.n_swa < 0) fail("{}: {}.attention.sliding_window is negative", f.path(), hp.arch_name);
  hp.swa_layers.assign(hp.n_layer, 1);
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Layer);
  w.output_bias = ld.vector("output.bias", w.token_embd.rows(), false);
  const TensorView shorts = ld.vector("rope_factors_short.weight", hp.n_rot / 2, false);
  const TensorView longs = ld.vector("rope_factors_long.weight", hp.n_rot / 2, false);
  if ((bool)shorts != (bool)longs)
    fail("{}: phimoe needs both rope_factors_short.weight and rope_factors_long.weight, or neither",
         ld.file().path());
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    s.norm = NormKind::Layer;
    ld.norms(il, L, NormKind::Layer);
    ld.attention(il, L, {.qkv_bias = true, .out_bias = true});
    if (hp.is_swa(il)) s.attn.params.window = hp.n_swa;
    L.rope_freqs = shorts;
    L.rope_freqs_long = longs;
    ld.moe(il, L, {});
    s.ffn = FfnKind::Moe;
    s.moe.routing.gating = RoutingSpec::Gating::SparseMixer;
    s.moe.routing.jitter_eps = kRouterJitter;
    s.moe.routing.norm_weights = false;  // the router's weights are used as they are
  }
}

}  // namespace

const ArchDef& arch_phimoe() {
  static const ArchDef d{"phimoe",
                         "Phi-3.5-MoE",
                         /*dense_allowed=*/false,
                         /*norm_topk_default=*/false,
                         &load_hparams,
                         &build};
  return d;
}

}  // namespace moeflow
