#pragma once
// Hyper-parameters of a model, read only from GGUF metadata (llama.cpp key conventions, prefix
// = general.architecture): the keys every architecture has are read here, the architecture's
// own ones by its file in model/arch/.
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow {

class GgufFile;
struct ArchDef;

// Router settings from <arch>.expert_* keys (llama.cpp names), for the architectures that have
// them; RoutingSpec is filled from these.
struct MoeRouting {
  enum class Gating : uint8_t { Softmax = 1, Sigmoid = 2 };  // llama.cpp's expert_gating_func
  Gating gating = Gating::Softmax;
  float weights_scale = 1.0f;  // expert_weights_scale (routed scaling factor)
  int n_group = 1;             // expert_group_count
  int n_group_used = 1;        // expert_group_used_count
};

// <arch>.rope.scaling.* as llama.cpp reads them (type, factor, original context, YaRN betas,
// attn_factor which multiplies the rotated values).
struct RopeScaling {
  enum class Type : uint8_t { None, Linear, Yarn, LongRope };
  Type type = Type::None;
  float factor = 1.0f;       // context extension factor (freq_scale = 1 / factor)
  int64_t n_ctx_orig = 0;    // original_context_length (default: context_length)
  float attn_factor = 1.0f;  // rope.scaling.attn_factor
  float beta_fast = 32.0f, beta_slow = 1.0f;
  float yarn_log_mul = 0.0f;  // DeepSeek's mscale_all_dim (the stored 0.1 * it, undone)
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): per-head sizes of the decompressed
// attention and the ranks of the low-rank projections.
struct MlaDims {
  int64_t q_lora_rank = 0;   // 0: q is one projection (attn_q)
  int64_t kv_lora_rank = 0;  // the compressed latent the KV cache holds
  int64_t head_dim_k = 0;    // nope + rope dims of each q/k head
  int64_t head_dim_v = 0;    // value dims of each head
  bool split_kv_b = true;    // attn_k_b/attn_v_b (current converters) or one attn_kv_b (older)
};

// Gated DeltaNet (linear attention) sizes from <arch>.ssm.* (llama.cpp's names for Qwen3-Next /
// Qwen3.5): conv_kernel, state_size (key/value head dims), group_count (key heads),
// time_step_rank (value heads), inner_size (value heads * value head dims).
struct SsmDims {
  int64_t d_conv = 0, d_state = 0, n_group = 0, dt_rank = 0, d_inner = 0;
};

struct HParams {
  std::string arch_name;
  const ArchDef* arch = nullptr;
  int64_t n_vocab = 0;  // rows of token_embd
  int64_t n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int64_t head_dim = 0;    // key_length
  int64_t head_dim_v = 0;  // value_length
  int64_t n_rot = 0;       // rope.dimension_count
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  int64_t n_ctx_train = 0;
  int n_expert = 0;  // 0 = dense model
  int n_expert_used = 0;
  int64_t n_ff = 0;        // dense FFN size
  int64_t n_ff_exp = 0;    // routed expert FFN size
  int64_t n_ff_shexp = 0;  // shared expert FFN size
  bool norm_topk = false;
  // Read by the architectures that have them (DeepSeek, GLM), zero / defaults otherwise.
  int n_layer_dense_lead = 0;  // leading_dense_block_count: layers 0.. run a dense FFN
  int n_expert_shared = 0;     // expert_shared_count (shared FFN = n_expert_shared * n_ff_exp)
  int n_layer_nextn = 0;       // nextn_predict_layers: MTP blocks after the trunk, not run
  MoeRouting routing;
  RopeScaling rope_scaling;
  MlaDims mla;
  // Sliding-window attention (read by the architectures that have it, see load_sliding_window):
  // the window and, per layer, whether that layer uses it.
  int64_t n_swa = 0;
  std::vector<uint8_t> swa_layers;
  float rope_base_swa = 0.0f;  // rope.freq_base_swa (default: rope.freq_base)
  // Hybrid models (qwen3next, qwen35moe): which layers are recurrent (gated DeltaNet), their
  // sizes, and the multimodal RoPE sections (rope.dimension_sections; text positions make them
  // plain RoPE).
  std::vector<uint8_t> recurrent_layers;
  SsmDims ssm;
  std::vector<int64_t> rope_sections;
  // attention.head_count_kv as an array: one entry per layer (Gemma 4's global layers have fewer
  // kv heads); empty when it is one number. n_head_kv is then the largest entry, and only the
  // architectures that build their attention per layer accept a non-uniform array.
  std::vector<int> n_head_kv_layers;
  // Gemma 4 (read by its file): the sliding layers' head size and rotary dims, the embedding's
  // scale, and the soft cap of the final logits (0: none).
  int64_t head_dim_swa = 0;
  int64_t n_rot_swa = 0;
  float embd_scale = 1.0f;
  float logit_softcap = 0.0f;

  bool is_swa(int layer) const {
    return n_swa > 0 && layer >= 0 && layer < (int)swa_layers.size() && swa_layers[layer];
  }

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t k_dim() const { return n_head_kv * head_dim; }
  int64_t v_dim() const { return n_head_kv * head_dim_v; }
  int64_t attn_out_dim() const { return n_head * head_dim_v; }
};

// Throws moeflow::Error naming the file and key for missing or inconsistent values, and the
// architecture (listing the supported ones) when general.architecture is not supported.
HParams load_hparams(const GgufFile& f);

// Helpers for the architecture files: "<arch>.<key>" as a positive integer (<= 2^31), or
// `fallback` when absent (fallback < 0: required).
int64_t hparam_positive(const GgufFile& f, const HParams& hp, const std::string& key,
                        int64_t fallback = -1);
// "<arch>.<key>" as an integer in [0, 2^31], `fallback` when absent (fallback < 0: required).
int64_t hparam_count(const GgufFile& f, const HParams& hp, const std::string& key,
                     int64_t fallback);

// Shared readers for the architectures that have these keys (llama.cpp names and defaults).
// rope.scaling.{type,factor,original_context_length,attn_factor,yarn_beta_fast,yarn_beta_slow,
// yarn_log_multiplier} (and the old rope.scale_linear); load_hparams calls it for every
// architecture.
void load_rope_scaling(const GgufFile& f, HParams& hp);
// expert_gating_func (absent or 0: `default_gating`), expert_weights_scale (absent or 0: none),
// expert_group_count / expert_group_used_count, checked against expert_count.
void load_moe_routing(const GgufFile& f, HParams& hp, MoeRouting::Gating default_gating);

// attention.sliding_window (required) and attention.sliding_window_pattern: an array of bools
// (per layer) or a period n where layer il slides unless il % n == n - 1 (llama.cpp's rule; 0:
// every layer), `default_period` when absent. Also rope.freq_base_swa.
void load_sliding_window(const GgufFile& f, HParams& hp, int64_t default_period);

}  // namespace moeflow
