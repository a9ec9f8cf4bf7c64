#include "model/gen/gen_metadata.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "model/gen/gen_vocab.h"

namespace moeflow::gen {

int llama_file_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 11;  // Q3_K_S: every tensor Q3_K
    case GgmlType::Q4_K: return 14;  // Q4_K_S
    case GgmlType::Q5_K: return 16;  // Q5_K_S
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::MXFP4: return 38;  // MXFP4_MOE: the experts in MXFP4
    case GgmlType::BF16: return 32;
    default: return -1;
  }
}

namespace {

// Gemma 4's per-layer keys as llama.cpp's converter writes them: kv heads per layer, the global
// layers' head size in key_length and the sliding ones' in key_length_swa, the pattern of
// sliding layers, both RoPE bases, the soft cap, and no per-layer embeddings or shared KV.
template <typename Key>
void write_gemma4(GgufWriter& w, const ModelShape& s, const Key& key) {
  std::vector<int32_t> kv;
  std::vector<GgufValue> swa;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    kv.push_back((int32_t)(s.is_swa_layer(l) ? s.n_head_kv : s.n_head_kv_global));
    swa.push_back(GgufValue::make_bool(s.is_swa_layer(l)));
  }
  w.set(key("attention.head_count_kv"), GgufValue::make_i32_array(kv));
  w.set(key("attention.sliding_window_pattern"),
        GgufValue::make_array(GgufType::BOOL, std::move(swa)));
  w.set_u32(key("attention.key_length"), (uint32_t)s.head_dim);
  w.set_u32(key("attention.value_length"), (uint32_t)s.head_dim);
  w.set_u32(key("attention.key_length_swa"), (uint32_t)s.head_dim_swa);
  w.set_u32(key("attention.value_length_swa"), (uint32_t)s.head_dim_swa);
  w.set_u32(key("rope.dimension_count_swa"), (uint32_t)s.head_dim_swa);
  w.set_f32(key("rope.freq_base_swa"), (float)s.rope_base_swa);
  w.set_f32(key("final_logit_softcapping"), (float)s.logit_softcap);
  w.set_u32(key("attention.shared_kv_layers"), 0);
  w.set_u32(key("embedding_length_per_layer_input"), 0);
}

}  // namespace

void write_metadata(GgufWriter& w, const GenOptions& opt) {
  const ModelShape& s = opt.shape;
  const std::string a = arch_gguf_name(s.arch);
  auto key = [&](const char* k) { return fmt::format("{}.{}", a, k); };
  auto u32 = [&](const char* k, int64_t v) { w.set_u32(key(k), (uint32_t)v); };

  w.set_string("general.architecture", a);
  w.set_string("general.name",
               fmt::format("moeflow synthetic {} {}", arch_cli_name(s.arch), s.preset));
  const GgmlType bulk = opt.expert_type.value_or(opt.type);
  if (int ft = llama_file_type(bulk); ft >= 0) w.set_u32("general.file_type", (uint32_t)ft);
  w.set_u32("general.quantization_version", 2);
  // Provenance, so a file can be regenerated or compared with its quantized siblings.
  w.set("moeflow.generator.seed", GgufValue::make_u64(opt.seed));
  w.set_f32("moeflow.generator.router_scale", opt.router_scale);

  u32("vocab_size", s.n_vocab);
  u32("context_length", s.n_ctx);
  u32("embedding_length", s.n_embd);
  u32("block_count", s.n_layer + s.n_nextn);
  // qwen35moe's config has no dense FFN size, and its converter writes none.
  if (s.n_ff > 0 || !s.hybrid()) u32("feed_forward_length", s.n_ff);
  u32("attention.head_count", s.n_head);
  if (s.mla()) {
    // MLA as MQA over the latent: one kv head of kv_lora_rank + rope dims; per-head sizes in *_mla.
    u32("attention.head_count_kv", 1);
    u32("attention.key_length", s.kv_lora_rank + s.qk_rope);
    u32("attention.value_length", s.kv_lora_rank);
    u32("attention.key_length_mla", s.qk_nope + s.qk_rope);
    u32("attention.value_length_mla", s.v_head_dim);
    // llama.cpp requires q_lora_rank except for the layer counts it knows as "lite" models, so
    // it is written even when 0 (no q compression).
    u32("attention.q_lora_rank", s.q_lora_rank);
    u32("attention.kv_lora_rank", s.kv_lora_rank);
  } else if (s.gemma4()) {
    write_gemma4(w, s, key);
  } else {
    u32("attention.head_count_kv", s.n_head_kv);
    u32("attention.key_length", s.head_dim);
    u32("attention.value_length", s.head_dim);
  }
  u32("rope.dimension_count", s.n_rot > 0 ? s.n_rot : s.head_dim);
  w.set_f32(key("rope.freq_base"), (float)s.rope_base);
  w.set_f32(key("attention.layer_norm_rms_epsilon"), (float)s.rms_eps);
  u32("expert_count", s.n_expert);
  u32("expert_used_count", s.n_expert_used);
  u32("expert_feed_forward_length", s.n_ff_exp);
  if (s.gated_shared_expert()) u32("expert_shared_feed_forward_length", s.n_ff_shexp);
  if (s.arch == GenArch::Deepseek2 || s.arch == GenArch::Glm4Moe) {
    u32("expert_shared_count", s.n_expert_shared);
    u32("leading_dense_block_count", s.n_layer_dense_lead);
    w.set_f32(key("expert_weights_scale"), (float)s.weights_scale);
    if (s.norm_topk) w.set_bool(key("expert_weights_norm"), true);
    u32("expert_gating_func", s.sigmoid ? 2 : 1);  // llama.cpp: 1 softmax, 2 sigmoid
    u32("expert_group_count", s.n_group);
    u32("expert_group_used_count", s.topk_group);
  }
  // llama.cpp's MiniMax-M2 converter writes the gating function (from scoring_func) and none of
  // the other routing keys: its graph always renormalises and never scales.
  if (s.arch == GenArch::MinimaxM2) u32("expert_gating_func", 2);
  if (s.n_nextn > 0) u32("nextn_predict_layers", s.n_nextn);
  if (s.hybrid()) {  // as llama.cpp's Qwen3-Next / Qwen3.5 converter writes them
    u32("ssm.conv_kernel", s.ssm_conv);
    u32("ssm.state_size", s.ssm_state);
    u32("ssm.group_count", s.ssm_k_heads);
    u32("ssm.time_step_rank", s.ssm_v_heads);
    u32("ssm.inner_size", s.ssm_v_heads * s.ssm_state);
    u32("full_attention_interval", s.full_attn_interval);
    if (!s.rope_sections.empty())
      w.set(key("rope.dimension_sections"), GgufValue::make_i32_array(std::vector<int32_t>(
                                                s.rope_sections.begin(), s.rope_sections.end())));
  }
  if (s.n_swa > 0) u32("attention.sliding_window", s.n_swa);
  if (s.yarn_factor > 0) {  // as llama.cpp's converters write a YaRN model
    w.set_string(key("rope.scaling.type"), "yarn");
    w.set_f32(key("rope.scaling.factor"), (float)s.yarn_factor);
    u32("rope.scaling.original_context_length", s.yarn_orig_ctx);
    w.set_f32(key("rope.scaling.yarn_beta_fast"), 32.0f);
    w.set_f32(key("rope.scaling.yarn_beta_slow"), 1.0f);
    // llama.cpp's converters store 0.1 * mscale_all_dim under this name.
    if (s.yarn_mscale_all_dim > 0)
      w.set_f32(key("rope.scaling.yarn_log_multiplier"), (float)(0.1 * s.yarn_mscale_all_dim));
  }
  if (s.arch == GenArch::PhiMoe) {
    // llama.cpp's Phi-3 converter: the original context and sqrt(1 + ln(s) / ln(orig)) with s
    // the context extension (the factors themselves are tensors).
    u32("rope.scaling.original_context_length", s.rope_n_ctx_orig);
    const double ext = (double)s.n_ctx / (double)s.rope_n_ctx_orig;
    const double attn =
        ext > 1 ? std::sqrt(1 + std::log(ext) / std::log((double)s.rope_n_ctx_orig)) : 1.0;
    w.set_f32(key("rope.scaling.attn_factor"), (float)attn);
  }

  const SynthVocab v = make_synth_vocab(s.n_vocab);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", GgufValue::make_string_array(v.tokens));
  w.set("tokenizer.ggml.scores", GgufValue::make_f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::make_i32_array(v.types));
  w.set_u32("tokenizer.ggml.bos_token_id", (uint32_t)v.bos_id);
  w.set_u32("tokenizer.ggml.eos_token_id", (uint32_t)v.eos_id);
  w.set_u32("tokenizer.ggml.unknown_token_id", (uint32_t)v.unk_id);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace moeflow::gen
