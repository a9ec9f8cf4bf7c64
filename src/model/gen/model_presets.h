#pragma once
// Hyper-parameters of the MoE architectures that `moeflow gen-model` can synthesise: small test
// shapes plus the exact shapes of the released models, named as llama.cpp names them.
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow::gen {

enum class GenArch {
  Mixtral,
  Qwen2Moe,
  Qwen3Moe,
  Olmoe,
  Deepseek2,
  Glm4Moe,
  GptOss,
  PhiMoe,
  Qwen3Next,
  Qwen35Moe,
  MinimaxM2,
  Gemma4
};

// Where the attention has q/k RMS norms: none, per head (Qwen3: weight of head_dim), or over the
// whole projection (OLMoE: weight of n_head*head_dim).
enum class QkNorm { None, PerHead, Full };

struct ModelShape {
  GenArch arch = GenArch::Mixtral;
  std::string preset;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;        // <arch>.feed_forward_length
  int64_t n_ff_exp = 0;    // rows of one routed expert
  int64_t n_ff_shexp = 0;  // shared expert(s) FFN size, 0 = none
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ctx = 0;
  double rope_base = 10000.0;
  double rms_eps = 1e-5;
  // gpt-oss: a window on layers 0, 2, ... (and YaRN below); phimoe: a window on every layer
  // (when > 0) and LongRoPE over rope_n_ctx_orig.
  int64_t n_swa = 0;
  int64_t rope_n_ctx_orig = 0;

  // DeepSeek / GLM / MiniMax layouts (deepseek2, glm4moe, minimax-m2); defaults elsewhere.
  int64_t n_layer_dense_lead = 0;  // leading layers with a dense FFN of n_ff
  int64_t n_expert_shared = 0;     // ungated shared experts of n_ff_exp each (n_ff_shexp = product)
  int64_t n_rot = 0;         // rotary dims of a head (0: head_dim; glm4moe, minimax-m2: half of it)
  bool glm_qk_norm = false;  // glm4moe: per-head q/k RMSNorm (GLM-4.5, not -Air)
  int64_t n_nextn = 0;       // glm4moe: next-token-prediction blocks after the trunk
  bool sigmoid = false;      // sigmoid routing with a selection bias (exp_probs_b)
  bool norm_topk = false;    // expert_weights_norm
  double weights_scale = 1.0;  // expert_weights_scale
  int64_t n_group = 1, topk_group = 1;
  // Multi-head latent attention (deepseek2): q_lora_rank 0 = a single attn_q.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head_dim = 0;
  // YaRN rope scaling: factor 0 = none; mscale_all_dim as DeepSeek's configs have it.
  double yarn_factor = 0;
  int64_t yarn_orig_ctx = 0;
  double yarn_mscale_all_dim = 0;
  // Gemma 4: every swa_period-th layer (and the last) is global, the others slide over n_swa
  // positions with heads of head_dim_swa, n_head_kv kv heads and RoPE base rope_base_swa; the
  // global ones have heads of head_dim, n_head_kv_global kv heads sharing the key projection as
  // values, RoPE of base rope_base rotating the leading rope_partial_global of each head
  // (proportional RoPE, the rope_freqs divisors); a dense FFN of n_ff beside the experts; the
  // final logits soft-capped at logit_softcap.
  int64_t head_dim_swa = 0, n_head_kv_global = 0, swa_period = 0;
  double rope_base_swa = 0, rope_partial_global = 0, logit_softcap = 0;
  bool gemma4() const { return arch == GenArch::Gemma4; }
  bool is_swa_layer(int64_t l) const {
    return gemma4() && (l + 1) % swa_period != 0 && l != n_layer - 1;
  }

  // Gated DeltaNet hybrids (qwen3next, qwen35moe): every full_attn_interval-th layer is full
  // attention, the others DeltaNet with ssm_k_heads key heads and ssm_v_heads value heads of
  // ssm_state dims and a ssm_conv-tap convolution; rope_sections are qwen35moe's IMRoPE
  // sections (rope.dimension_sections).
  int64_t ssm_conv = 0, ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0, full_attn_interval = 0;
  std::vector<int> rope_sections;

  bool hybrid() const { return arch == GenArch::Qwen3Next || arch == GenArch::Qwen35Moe; }
  bool recurrent_layer(int64_t l) const {
    return hybrid() && l < n_layer && (l + 1) % full_attn_interval != 0;
  }
  QkNorm qk_norm() const;
  bool qkv_bias() const {
    return arch == GenArch::Qwen2Moe || arch == GenArch::Glm4Moe || arch == GenArch::GptOss ||
           arch == GenArch::PhiMoe;
  }
  // attn_output.bias (gpt-oss, phimoe)
  bool out_bias() const { return arch == GenArch::GptOss || arch == GenArch::PhiMoe; }
  bool shared_expert() const { return n_ff_shexp > 0; }
  bool gated_shared_expert() const { return arch == GenArch::Qwen2Moe || hybrid(); }
  bool mla() const { return arch == GenArch::Deepseek2; }
  bool moe_layer(int64_t l) const { return l >= n_layer_dense_lead; }
  // Throws moeflow::Error naming the setting when the shape cannot make a valid model.
  void validate() const;
};

// "mixtral" -> GenArch; throws naming the valid choices.
GenArch parse_arch(const std::string& name);
const char* arch_cli_name(GenArch a);
// general.architecture as llama.cpp spells it (Mixtral is "llama" with experts).
const char* arch_gguf_name(GenArch a);

std::vector<std::string> preset_names(GenArch a);
// Throws naming the arch and the presets it has.
ModelShape find_preset(GenArch a, const std::string& preset);

}  // namespace moeflow::gen
