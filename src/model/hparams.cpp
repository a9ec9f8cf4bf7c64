#include "model/hparams.h"

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace moeflow {

HParams load_hparams(const GgufFile& f) {
  HParams hp;
  hp.arch_name = f.get_string("general.architecture");
  hp.arch = &find_arch(hp.arch_name);
  const std::string p = hp.arch_name + ".";
  auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0 || v > (int64_t(1) << 31))
      fail("{}: metadata '{}' = {} is out of range", f.path(), key, v);
    return v;
  };
  hp.n_embd = positive(p + "embedding_length", f.get_int(p + "embedding_length"));
  hp.n_layer = (int)positive(p + "block_count", f.get_int(p + "block_count"));
  hp.n_head = (int)positive(p + "attention.head_count", f.get_int(p + "attention.head_count"));
  hp.n_head_kv = (int)positive(p + "attention.head_count_kv",
                               f.get_int(p + "attention.head_count_kv", hp.n_head));
  if (hp.n_head % hp.n_head_kv != 0)
    fail("{}: attention.head_count {} is not a multiple of head_count_kv {}", f.path(), hp.n_head,
         hp.n_head_kv);
  hp.head_dim = positive(p + "attention.key_length",
                         f.get_int(p + "attention.key_length", hp.n_embd / hp.n_head));
  hp.head_dim_v = positive(p + "attention.value_length",
                           f.get_int(p + "attention.value_length", hp.head_dim));
  hp.n_rot = positive(p + "rope.dimension_count", f.get_int(p + "rope.dimension_count", hp.head_dim));
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
    hp.n_ff_exp = positive(p + "expert_feed_forward_length",
                           f.get_int(p + "expert_feed_forward_length", hp.n_ff));
    if (hp.arch->shared_expert)
      hp.n_ff_shexp = positive(p + "expert_shared_feed_forward_length",
                               f.get_int(p + "expert_shared_feed_forward_length"));
    hp.norm_topk = f.get_bool(p + "expert_weights_norm", hp.arch->norm_topk_default);
  } else if (hp.arch->shared_expert || hp.arch_name != "llama") {
    fail("{}: architecture '{}' needs {}expert_count > 0", f.path(), hp.arch_name, p);
  }
  return hp;
}

}  // namespace moeflow
