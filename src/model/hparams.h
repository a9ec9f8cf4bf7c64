#pragma once
// Hyper-parameters of a model, read only from GGUF metadata (llama.cpp key conventions, prefix
// = general.architecture): the keys every architecture has are read here, the architecture's
// own ones by its file in model/arch/.
#include <cstdint>
#include <string>

namespace moeflow {

class GgufFile;
struct ArchDef;

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
  int n_expert = 0;        // 0 = dense model
  int n_expert_used = 0;
  int64_t n_ff = 0;        // dense FFN size
  int64_t n_ff_exp = 0;    // routed expert FFN size
  int64_t n_ff_shexp = 0;  // shared expert FFN size
  bool norm_topk = false;

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

}  // namespace moeflow
