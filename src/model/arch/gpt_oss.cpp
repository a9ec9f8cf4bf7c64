// "gpt-oss": gpt-oss-20b, gpt-oss-120b. NeoX RoPE with YaRN, biases on q/k/v/o, one attention
// sink logit per head, a sliding window on every other layer (llama.cpp's pattern 2: layers
// 0, 2, 4, ... slide), a router with a bias whose top-k logits are softmaxed, experts with
// biases and the clamped SwiGLU (x * sigmoid(1.702 x) * (y + 1), x <= 7, |y| <= 7).
// Tensor names as llama.cpp's converter writes them: the FFN norm is post_attention_norm.
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/arch/arch.h"
#include "model/rope_scaling.h"
#include "model/weights.h"

namespace moeflow {
namespace {

// The model's swiglu_limit and its fixed sigmoid slope; llama.cpp hard-codes both as well (no
// GGUF key carries them).
constexpr float kSwigluLimit = 7.0f;
constexpr float kSwigluAlpha = 1.702f;

void load_hparams(const GgufFile& f, HParams& hp) { load_sliding_window(f, hp, 2); }

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  const int64_t d = hp.n_embd;
  const RopeScaling& rs = hp.rope_scaling;
  const bool yarn = rs.type == RopeScaling::Type::Yarn;
  if (rs.type != RopeScaling::Type::None && !yarn)
    fail("{}: gpt-oss.rope.scaling.type must be yarn or absent", ld.file().path());
  // The model's YaRN ramp is not rounded to whole dims (its reference implementation and
  // transformers' truncate=false; ggml rounds): the rope op gets it as per-pair divisors.
  TensorView freqs, freqs_swa;
  if (yarn) {
    auto divisors = [&](float base) {
      return ld.own_vector(
          yarn_freq_divisors(hp.n_rot, base, rs.factor, rs.n_ctx_orig, rs.beta_fast, rs.beta_slow));
    };
    freqs = divisors(hp.rope_base);
    freqs_swa = hp.rope_base_swa == hp.rope_base ? freqs : divisors(hp.rope_base_swa);
  }
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    L.attn_norm = ld.layer_vector(il, "attn_norm.weight", d);
    L.ffn_norm = ld.layer_vector(il, "post_attention_norm.weight", d);
    ld.attention(il, L, {.qkv_bias = true, .out_bias = true, .sinks = true});
    s.attn.sinks = true;
    const bool swa = hp.is_swa(il);
    if (swa) {
      s.attn.params.window = hp.n_swa;
      s.attn.rope.freq_base = hp.rope_base_swa;
    }
    if (yarn) {
      RopeParams& r = s.attn.rope;
      r.freq_scale = 1.0f;
      r.ext_factor = 0.0f;
      r.attn_factor = rs.attn_factor * yarn_mscale(rs.factor);
      L.rope_freqs = swa ? freqs_swa : freqs;
    }
    ld.moe(il, L, {.router_bias = true, .expert_bias = true});
    s.ffn = FfnKind::Moe;
    s.moe.routing.softmax_after_topk = true;
    s.moe.act = {GluKind::SwiGLUOai, kSwigluLimit, kSwigluAlpha};
  }
}

}  // namespace

const ArchDef& arch_gpt_oss() {
  static const ArchDef d{"gpt-oss",
                         "gpt-oss-20b, gpt-oss-120b",
                         /*dense_allowed=*/false,
                         /*norm_topk_default=*/false,
                         &load_hparams,
                         &build};
  return d;
}

}  // namespace moeflow
