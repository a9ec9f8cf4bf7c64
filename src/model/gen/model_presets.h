#pragma once
// Hyper-parameters of the MoE architectures that `moeflow gen-model` can synthesise: small test
// shapes plus the exact shapes of the released models, named as llama.cpp names them.
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow::gen {

enum class GenArch { Mixtral, Qwen2Moe, Qwen3Moe, Olmoe, GptOss, PhiMoe };

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
  int64_t n_ff_shexp = 0;  // shared expert (qwen2moe), 0 = none
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ctx = 0;
  double rope_base = 10000.0;
  double rms_eps = 1e-5;
  // gpt-oss: a window on layers 0, 2, ... and YaRN; phimoe: a window on every layer (when > 0)
  // and LongRoPE over rope_n_ctx_orig.
  int64_t n_swa = 0;
  double rope_yarn_factor = 0.0;
  int64_t rope_n_ctx_orig = 0;

  QkNorm qk_norm() const;
  bool qkv_bias() const {
    return arch == GenArch::Qwen2Moe || arch == GenArch::GptOss || arch == GenArch::PhiMoe;
  }
  // attn_output.bias (gpt-oss, phimoe)
  bool out_bias() const { return arch == GenArch::GptOss || arch == GenArch::PhiMoe; }
  bool shared_expert() const { return n_ff_shexp > 0; }
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
