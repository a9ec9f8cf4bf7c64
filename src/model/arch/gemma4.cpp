// "gemma4": Gemma 4 26B-A4B (the MoE member of the family). Five sliding-window layers (head
// size key_length_swa, NeoX RoPE over rope.dimension_count_swa dims at rope.freq_base_swa) to one
// global layer (head size key_length, fewer kv heads, RoPE of base rope.freq_base over the whole
// head with the per-pair divisors of rope_freqs: Gemma's "proportional" RoPE rotates only the
// leading pairs, the divisors of the others are 1e30), values without a projection of their own
// on the global layers (the key projection, attention_k_eq_v), q/k RMS norms, weightless RMS
// norms of the values, attention scale 1, post-attention and post-FFN norms, a dense GELU FFN
// beside the MoE block with their own norms, a router on its own normalised input with a
// learned input scale, softmax top-k renormalised and times a per-expert factor, GELU experts,
// the embedding times sqrt(n_embd), a per-layer output scale, soft-capped final logits.
// Norm weights are stored as they are applied (Gemma 4's converter shifts none by +1).
//
// Refused by name: per-layer input embeddings and layers that reuse another layer's KV (the
// E2B/E4B models), dense models (31B) and dense layers, a fused attn_qkv.
#include <cmath>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/arch/arch.h"
#include "model/weights.h"

namespace moeflow {
namespace {

// llama.cpp's default base of the sliding layers when rope.freq_base_swa is absent (its hparams
// default, not rope.freq_base).
constexpr double kDefaultRopeBaseSwa = 10000.0;

void load_hparams(const GgufFile& f, HParams& hp) {
  const std::string p = hp.arch_name + ".";
  if (hp.n_expert == 0)
    fail(
        "{}: {}expert_count is missing: dense Gemma 4 models (31B, E2B, E4B) are not supported, "
        "only the MoE 26B-A4B",
        f.path(), p);
  if (const int64_t n = f.get_int(p + "embedding_length_per_layer_input", 0); n != 0)
    fail(
        "{}: {}embedding_length_per_layer_input = {}: per-layer input embeddings (Gemma 4 "
        "E2B/E4B) are not supported",
        f.path(), p, n);
  if (const int64_t n = f.get_int(p + "attention.shared_kv_layers", 0); n != 0)
    fail(
        "{}: {}attention.shared_kv_layers = {}: layers that reuse another layer's KV (Gemma 4 "
        "E2B/E4B) are not supported",
        f.path(), p, n);
  if (hp.rope_scaling.type != RopeScaling::Type::None)
    fail("{}: {}rope.scaling.* is set; Gemma 4's RoPE has no scaling in moeflow", f.path(), p);
  // The pattern says which layers slide (llama.cpp requires it for gemma4).
  if (!f.has(p + "attention.sliding_window_pattern"))
    fail("{}: missing metadata '{}attention.sliding_window_pattern' (which layers slide)", f.path(),
         p);
  load_sliding_window(f, hp, 0);
  hp.rope_base_swa = (float)f.get_float(p + "rope.freq_base_swa", kDefaultRopeBaseSwa);
  if (!(hp.rope_base_swa > 0)) fail("{}: {}rope.freq_base_swa must be positive", f.path(), p);
  hp.head_dim_swa = hparam_positive(f, hp, "attention.key_length_swa", hp.head_dim);
  if (hparam_positive(f, hp, "attention.value_length_swa", hp.head_dim_swa) != hp.head_dim_swa ||
      hp.head_dim_v != hp.head_dim)
    fail("{}: Gemma 4 needs {}attention.value_length(_swa) equal to key_length(_swa)", f.path(), p);
  hp.n_rot_swa = hparam_positive(f, hp, "rope.dimension_count_swa", hp.n_rot);
  if (hp.n_rot_swa > hp.head_dim_swa || hp.n_rot_swa % 2 != 0)
    fail("{}: {}rope.dimension_count_swa {} must be even and at most key_length_swa {}", f.path(),
         p, hp.n_rot_swa, hp.head_dim_swa);
  hp.logit_softcap = (float)f.get_float(p + "final_logit_softcapping", 0.0);
  if (!(hp.logit_softcap >= 0) || !std::isfinite(hp.logit_softcap))
    fail("{}: {}final_logit_softcapping = {} must be a non-negative number", f.path(), p,
         hp.logit_softcap);
  // Gemma scales the looked-up embedding by sqrt(n_embd) (a float, as llama.cpp computes it).
  hp.embd_scale = std::sqrt((float)hp.n_embd);
}

int kv_heads(const HParams& hp, int il) {
  return hp.n_head_kv_layers.empty() ? hp.n_head_kv : hp.n_head_kv_layers[il];
}

// attn_q/k/(v)/output, q/k norms of layer il at its own head size and kv head count.
void load_attention(ModelLoader& ld, const HParams& hp, int il, LayerWeights& L, AttentionSpec& a) {
  const int64_t d = hp.n_embd, hd = a.params.head_dim;
  const int64_t q_dim = (int64_t)hp.n_head * hd, kv_dim = (int64_t)a.params.n_head_kv * hd;
  if (ld.has(layer_tensor_name(il, "attn_qkv.weight")))
    fail("{}: layer {} has a fused attn_qkv, which moeflow does not support for gemma4",
         ld.file().path(), il);
  L.wq = ld.layer_matrix(il, "attn_q.weight", d, q_dim);
  L.wk = ld.layer_matrix(il, "attn_k.weight", d, kv_dim);
  L.wv = ld.layer_matrix(il, "attn_v.weight", d, kv_dim, false);
  L.wo = ld.layer_matrix(il, "attn_output.weight", q_dim, d);
  L.q_norm = ld.layer_vector(il, "attn_q_norm.weight", hd);
  L.k_norm = ld.layer_vector(il, "attn_k_norm.weight", hd);
  a.qk_norm = QkNorm::PerHead;
  a.v_from_k = !L.wv;
  a.v_norm = true;
  a.params.scale = 1.0f;  // the q/k norms set the logits' scale
}

// The dense FFN, the router with its input scale, the experts and the four FFN norms.
void load_ffn(ModelLoader& ld, const HParams& hp, int il, LayerWeights& L, LayerSpec& s) {
  const int64_t d = hp.n_embd;
  if (!ld.has(layer_tensor_name(il, "ffn_gate_inp.weight")))
    fail("{}: layer {} has no router (ffn_gate_inp): dense Gemma 4 layers are not supported",
         ld.file().path(), il);
  ld.dense_ffn(il, L);
  L.ffn_norm = ld.layer_vector(il, "ffn_norm.weight", d);
  L.ffn_post_norm_1 = ld.layer_vector(il, "post_ffw_norm_1.weight", d);
  L.ffn_pre_norm_2 = ld.layer_vector(il, "pre_ffw_norm_2.weight", d);
  L.ffn_post_norm_2 = ld.layer_vector(il, "post_ffw_norm_2.weight", d);
  ld.moe(il, L, {});
  // The router reads rms_norm(x) * scale / sqrt(n_embd): one weight vector of an RMSNorm.
  const TensorView scale = ld.layer_vector(il, "ffn_gate_inp.scale", d);
  std::vector<float> w(scale.as<float>(), scale.as<float>() + d);
  const float root = 1.0f / std::sqrt((float)d);
  for (float& v : w) v *= root;
  L.router_norm = ld.own_vector(std::move(w));
  L.exp_weight_scale = ld.layer_vector(il, "ffn_down_exps.scale", hp.n_expert, false);
  s.ffn = FfnKind::Moe;
  s.dense_beside_moe = true;
  s.dense_act = {GluKind::GeGLU};
  s.moe.act = {GluKind::GeGLU};
  // Softmax over all experts, top-k renormalised (llama.cpp passes norm_w = true whatever
  // expert_weights_norm says), then the per-expert factors (MoeBlock).
  s.moe.routing.norm_weights = true;
}

void build(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs) {
  ld.globals(NormKind::Rms);
  const int64_t d = hp.n_embd;
  // One table of divisors for every global layer (llama.cpp requires it).
  const TensorView freqs = ld.vector("rope_freqs.weight", hp.head_dim / 2);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    const bool swa = hp.is_swa(il);
    AttentionParams& ap = s.attn.params;
    ap.n_head_kv = kv_heads(hp, il);
    ap.head_dim = ap.head_dim_v = swa ? hp.head_dim_swa : hp.head_dim;
    if (swa) {
      ap.window = hp.n_swa;
      s.attn.rope.n_rot = hp.n_rot_swa;
      s.attn.rope.freq_base = hp.rope_base_swa;
    } else {
      L.rope_freqs = freqs;
    }
    L.attn_norm = ld.layer_vector(il, "attn_norm.weight", d);
    load_attention(ld, hp, il, L, s.attn);
    L.attn_post_norm = ld.layer_vector(il, "post_attention_norm.weight", d);
    L.ffn_post_norm = ld.layer_vector(il, "post_ffw_norm.weight", d);
    s.post_norms = true;
    load_ffn(ld, hp, il, L, s);
    if (const TensorView o = ld.layer_vector(il, "layer_output_scale.weight", 1, false))
      s.out_scale = *o.as<float>();
  }
}

}  // namespace

const ArchDef& arch_gemma4() {
  static const ArchDef d{"gemma4",
                         "Gemma 4 26B-A4B",
                         /*dense_allowed=*/true,  // refused in load_hparams, by name
                         /*norm_topk_default=*/true,
                         &load_hparams,
                         &build};
  return d;
}

}  // namespace moeflow
