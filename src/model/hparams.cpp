#include "model/hparams.h"

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_value.h"
#include "model/arch/arch.h"

namespace moeflow {

int64_t hparam_positive(const GgufFile& f, const HParams& hp, const std::string& key,
                        int64_t fallback) {
  const std::string full = hp.arch_name + "." + key;
  const int64_t v = fallback < 0 ? f.get_int(full) : f.get_int(full, fallback);
  if (v <= 0 || v > (int64_t(1) << 31)) fail("{}: metadata '{}' = {} is out of range", f.path(), full, v);
  return v;
}

void load_sliding_window(const GgufFile& f, HParams& hp, int64_t default_period) {
  const std::string p = hp.arch_name + ".";
  hp.n_swa = hparam_positive(f, hp, "attention.sliding_window");
  hp.rope_base_swa = (float)f.get_float(p + "rope.freq_base_swa", hp.rope_base);
  if (!(hp.rope_base_swa > 0)) fail("{}: {}rope.freq_base_swa must be positive", f.path(), p);
  const std::string key = p + "attention.sliding_window_pattern";
  hp.swa_layers.assign(hp.n_layer, 0);
  const GgufValue* v = f.find(key);
  if (v && v->type == GgufType::ARRAY) {
    const std::vector<int64_t> a = f.get_int_array(key);
    if ((int64_t)a.size() != hp.n_layer)
      fail("{}: {} has {} entries for {} layers", f.path(), key, a.size(), hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) hp.swa_layers[il] = a[il] != 0;
    return;
  }
  const int64_t period = v ? f.get_int(key) : default_period;
  if (period < 0 || period > hp.n_layer) fail("{}: {} = {} is out of range", f.path(), key, period);
  for (int il = 0; il < hp.n_layer; ++il)
    hp.swa_layers[il] = period == 0 || il % period < period - 1;
}

namespace {

void load_rope_scaling(const GgufFile& f, HParams& hp) {
  const std::string p = hp.arch_name + ".rope.scaling.";
  RopeScaling& rs = hp.rope_scaling;
  const std::string type = f.has(p + "type") ? f.get_string(p + "type") : "none";
  if (type == "none") rs.type = RopeScaling::Type::None;
  else if (type == "linear") rs.type = RopeScaling::Type::Linear;
  else if (type == "yarn") rs.type = RopeScaling::Type::Yarn;
  else if (type == "longrope") rs.type = RopeScaling::Type::LongRope;
  else fail("{}: {}type '{}' is not supported (none, linear, yarn, longrope)", f.path(), p, type);
  const double factor = f.get_float(p + "factor", 0.0);
  rs.factor = factor == 0.0 ? 1.0f : (float)factor;
  if (!(rs.factor > 0)) fail("{}: {}factor = {} must be positive", f.path(), p, factor);
  rs.n_ctx_orig = f.get_int(p + "original_context_length", hp.n_ctx_train);
  if (rs.n_ctx_orig <= 0) fail("{}: {}original_context_length must be positive", f.path(), p);
  rs.yarn_beta_fast = (float)f.get_float(p + "yarn_beta_fast", 32.0);
  rs.yarn_beta_slow = (float)f.get_float(p + "yarn_beta_slow", 1.0);
  rs.attn_factor = (float)f.get_float(p + "attn_factor", 1.0);
  if (!(rs.attn_factor > 0)) fail("{}: {}attn_factor must be positive", f.path(), p);
}

}  // namespace

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
  load_rope_scaling(f, hp);
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
