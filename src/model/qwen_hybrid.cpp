#include "model/qwen_hybrid.h"

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/weights.h"

namespace moeflow {

void load_qwen_hybrid_hparams(const GgufFile& f, HParams& hp, QwenHybrid v) {
  const std::string p = hp.arch_name + ".";
  hp.n_ff_shexp = hparam_positive(f, hp, "expert_shared_feed_forward_length");
  SsmDims& s = hp.ssm;
  s.d_conv = hparam_positive(f, hp, "ssm.conv_kernel");
  s.d_state = hparam_positive(f, hp, "ssm.state_size");
  s.n_group = hparam_positive(f, hp, "ssm.group_count");
  s.dt_rank = hparam_positive(f, hp, "ssm.time_step_rank");
  s.d_inner = hparam_positive(f, hp, "ssm.inner_size");
  if (s.d_conv < 2)
    fail("{}: {}ssm.conv_kernel = {}: the convolution needs at least 2 taps", f.path(), p,
         s.d_conv);
  if (s.dt_rank % s.n_group != 0)
    fail(
        "{}: {}ssm.time_step_rank {} (value heads) is not a multiple of ssm.group_count {} (key "
        "heads)",
        f.path(), p, s.dt_rank, s.n_group);
  // llama.cpp sizes the tensors with head_v = state_size and computes with inner_size /
  // time_step_rank: they must agree.
  if (s.d_inner != s.dt_rank * s.d_state)
    fail("{}: {}ssm.inner_size {} is not ssm.time_step_rank {} x ssm.state_size {}", f.path(), p,
         s.d_inner, s.dt_rank, s.d_state);
  if (hp.head_dim != hp.head_dim_v)
    fail("{}: {}attention.key_length {} and value_length {} must be equal", f.path(), p,
         hp.head_dim, hp.head_dim_v);

  // Which layers are gated DeltaNet: attention.recurrent_layers (one flag per block, MTP blocks
  // included), else every layer but each full_attention_interval-th.
  hp.recurrent_layers.assign(hp.n_layer, 0);
  const std::string key = p + "attention.recurrent_layers";
  if (f.has(key)) {
    const std::vector<int64_t> a = f.get_int_array(key);
    if ((int64_t)a.size() < hp.n_layer)
      fail("{}: {} has {} entries for {} layers", f.path(), key, a.size(), hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[il] = a[il] != 0;
  } else {
    const int64_t interval = hparam_positive(f, hp, "full_attention_interval", 4);
    for (int il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[il] = (il + 1) % interval != 0;
  }
  if (v == QwenHybrid::V35) {
    const std::string sk = p + "rope.dimension_sections";
    if (!f.has(sk)) fail("{}: missing key '{}' (IMRoPE sections)", f.path(), sk);
    hp.rope_sections = f.get_int_array(sk);
    int64_t sum = 0;
    for (int64_t x : hp.rope_sections) {
      if (x < 0) fail("{}: {} has a negative section", f.path(), sk);
      sum += x;
    }
    // Text positions are the same in every section, so the sections only split the rotated
    // pairs between equal positions: plain RoPE, as long as they cover no more than the pairs.
    if (sum * 2 > hp.n_rot)
      fail("{}: {} covers {} rotary pairs, rope.dimension_count has {}", f.path(), sk, sum,
           hp.n_rot / 2);
  }
}

void build_qwen_hybrid(ModelLoader& ld, const HParams& hp, ModelWeights& w,
                       std::vector<LayerSpec>& specs, QwenHybrid v) {
  ld.globals(NormKind::Rms);
  const int64_t d = hp.n_embd;
  const SsmDims& sd = hp.ssm;
  DeltaNetSpec ds;
  ds.n_k_heads = (int)sd.n_group;
  ds.n_v_heads = (int)sd.dt_rank;
  ds.head_k = sd.d_state;
  ds.head_v = sd.d_inner / sd.dt_rank;
  ds.d_conv = sd.d_conv;
  ds.tiled = v == QwenHybrid::V35;
  ds.fused_ba = v == QwenHybrid::Next;
  const int64_t C = ds.conv_channels(), value_dim = (int64_t)ds.n_v_heads * ds.head_v;
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    LayerSpec& s = specs[il] = ld.default_spec(RopeMode::NeoX);
    ld.norms(il, L, NormKind::Rms, "post_attention_norm");
    if (hp.recurrent_layers[il]) {
      if (ld.has(layer_tensor_name(il, "ssm_in.weight")) &&
          !ld.has(layer_tensor_name(il, "attn_qkv.weight")))
        fail(
            "{}: layer {} has the legacy fused ssm_in tensor of early qwen3next conversions, "
            "which moeflow does not read: convert the model again with a current llama.cpp",
            ld.file().path(), il);
      s.attn.kind = AttentionKind::GatedDeltaNet;
      s.attn.delta = ds;
      L.ssm_qkv = ld.layer_matrix(il, "attn_qkv.weight", d, C);
      L.ssm_z = ld.layer_matrix(il, "attn_gate.weight", d, value_dim);
      if (ds.fused_ba) {
        L.ssm_ba = ld.layer_matrix(il, "ssm_ba.weight", d, 2 * (int64_t)ds.n_v_heads);
      } else {
        L.ssm_beta = ld.layer_matrix(il, "ssm_beta.weight", d, ds.n_v_heads);
        L.ssm_alpha = ld.layer_matrix(il, "ssm_alpha.weight", d, ds.n_v_heads);
      }
      L.ssm_conv1d = ld.vectors(layer_tensor_name(il, "ssm_conv1d.weight"), ds.d_conv, C);
      L.ssm_a = ld.vector(layer_tensor_name(il, "ssm_a"), ds.n_v_heads);
      L.ssm_dt = ld.layer_vector(il, "ssm_dt.bias", ds.n_v_heads);
      L.ssm_norm = ld.layer_vector(il, "ssm_norm.weight", ds.head_v);
      L.ssm_out = ld.layer_matrix(il, "ssm_out.weight", value_dim, d);
    } else {
      // attn_q is [q | gate] per head, twice the query width.
      L.wq = ld.layer_matrix(il, "attn_q.weight", d, 2 * hp.q_dim());
      L.wk = ld.layer_matrix(il, "attn_k.weight", d, hp.k_dim());
      L.wv = ld.layer_matrix(il, "attn_v.weight", d, hp.v_dim());
      L.wo = ld.layer_matrix(il, "attn_output.weight", hp.attn_out_dim(), d);
      L.q_norm = ld.layer_vector(il, "attn_q_norm.weight", hp.head_dim);
      L.k_norm = ld.layer_vector(il, "attn_k_norm.weight", hp.head_dim);
      s.attn.qk_norm = QkNorm::PerHead;
      s.attn.output_gate = true;
    }
    ld.moe(il, L, {.shared = true, .shared_gate = true, .n_ff_shexp = hp.n_ff_shexp});
    s.ffn = FfnKind::Moe;
    s.moe.shared_expert = true;
    s.moe.shared_gate = GateFn::Sigmoid;
    // llama.cpp renormalises the top-k softmax weights of these models whatever the file says.
    s.moe.routing.norm_weights = true;
  }
}

}  // namespace moeflow
