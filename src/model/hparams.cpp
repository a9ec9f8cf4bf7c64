#include "model/hparams.h"

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/arch/arch.h"

namespace moeflow {

int64_t hparam_positive(const GgufFile& f, const HParams& hp, const std::string& key,
                        int64_t fallback) {
  const std::string full = hp.arch_name + "." + key;
  const int64_t v = fallback < 0 ? f.get_int(full) : f.get_int(full, fallback);
  if (v <= 0 || v > (int64_t(1) << 31)) fail("{}: metadata '{}' = {} is out of range", f.path(), full, v);
  return v;
}

HParams load_hparams(const GgufFile& f) {
  HParams hp;
  hp.arch_name = f.get_string("general.architecture");
  hp.arch = &find_arch(hp.arch_name);
  const std::string p = hp.arch_name + ".";
  hp.n_embd = hparam_positive(f, hp, "embedding_length");
  hp.n_layer = (int)hparam_positive(f, hp, "block_count");
  hp.n_head = (int)hparam_positive(f, hp, "attention.head_count");
  hp.n_head_kv = (int)hparam_positive(f, hp, "attention.head_count_kv", hp.n_head);
  if (hp.n_head % hp.n_head_kv != 0)
    fail("{}: attention.head_count {} is not a multiple of head_count_kv {}", f.path(), hp.n_head,
         hp.n_head_kv);
  hp.head_dim = hparam_positive(f, hp, "attention.key_length", hp.n_embd / hp.n_head);
  hp.head_dim_v = hparam_positive(f, hp, "attention.value_length", hp.head_dim);
  hp.n_rot = hparam_positive(f, hp, "rope.dimension_count", hp.head_dim);
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", f.path(),
         hp.n_rot, hp.head_dim);
  hp.rope_base = (float)f.get_float(p + "rope.freq_base", 10000.0);
  if (!(hp.rope_base > 0)) fail("{}: {}rope.freq_base must be positive", f.path(), p);
  hp.rms_eps = (float)f.get_float(p + "attention.layer_norm_rms_epsilon");
  if (!(hp.rms_eps >= 0)) fail("{}: {}attention.layer_norm_rms_epsilon is negative", f.path(), p);
  hp.n_ctx_train = f.get_int(p + "context_length", 4096);
  hp.n_ff = f.get_int(p + "feed_forward_length", 0);
  hp.n_expert = (int)f.get_int(p + "expert_count", 0);
  if (hp.n_expert < 0 || hp.n_expert > 4096)
    fail("{}: {}expert_count = {} is out of range", f.path(), p, hp.n_expert);
  if (hp.n_expert > 0) {
    hp.n_expert_used = (int)f.get_int(p + "expert_used_count");
    if (hp.n_expert_used <= 0 || hp.n_expert_used > hp.n_expert)
      fail("{}: {}expert_used_count = {} must be in [1, expert_count = {}]", f.path(), p,
           hp.n_expert_used, hp.n_expert);
    hp.n_ff_exp = hparam_positive(f, hp, "expert_feed_forward_length", hp.n_ff);
    hp.norm_topk = f.get_bool(p + "expert_weights_norm", hp.arch->norm_topk_default);
  } else if (!hp.arch->dense_allowed) {
    fail("{}: architecture '{}' needs {}expert_count > 0", f.path(), hp.arch_name, p);
  }
  if (hp.arch->load_hparams) hp.arch->load_hparams(f, hp);
  return hp;
}

}  // namespace moeflow
