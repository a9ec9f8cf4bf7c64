#include "model/hparams.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_value.h"
#include "model/arch/arch.h"

namespace moeflow {

int64_t hparam_positive(const GgufFile& f, const HParams& hp, const std::string& key,
                        int64_t fallback) {
  const std::string full = hp.arch_name + "." + key;
  const int64_t v = fallback < 0 ? f.get_int(full) : f.get_int(full, fallback);
  if (v <= 0 || v > (int64_t(1) << 31))
    fail("{}: metadata '{}' = {} is out of range", f.path(), full, v);
  return v;
}

int64_t hparam_count(const GgufFile& f, const HParams& hp, const std::string& key,
                     int64_t fallback) {
  const std::string full = hp.arch_name + "." + key;
  const int64_t v = fallback < 0 ? f.get_int(full) : f.get_int(full, fallback);
  if (v < 0 || v > (int64_t(1) << 31))
    fail("{}: metadata '{}' = {} is out of range", f.path(), full, v);
  return v;
}

void load_rope_scaling(const GgufFile& f, HParams& hp) {
  const std::string p = hp.arch_name + ".";
  RopeScaling& r = hp.rope_scaling;
  // llama.cpp: no type means linear, and an absent or zero factor means no scaling.
  const std::string type =
      f.has(p + "rope.scaling.type") ? f.get_string(p + "rope.scaling.type") : "linear";
  double factor = f.get_float(p + "rope.scaling.factor", 0.0);
  if (factor == 0.0) factor = f.get_float(p + "rope.scale_linear", 0.0);
  if (type == "none") {
    r.type = RopeScaling::Type::None;
  } else if (type == "linear") {
    r.type = factor == 0.0 ? RopeScaling::Type::None : RopeScaling::Type::Linear;
  } else if (type == "yarn") {
    r.type = RopeScaling::Type::Yarn;
  } else if (type == "longrope") {
    r.type = RopeScaling::Type::LongRope;
  } else {
    fail("{}: {}rope.scaling.type '{}' is not supported (none, linear, yarn, longrope)", f.path(),
         p, type);
  }
  r.factor = factor == 0.0 ? 1.0f : (float)factor;
  if (!(r.factor > 0) || !std::isfinite(r.factor))
    fail("{}: {}rope.scaling.factor = {} must be positive", f.path(), p, factor);
  r.n_ctx_orig = f.get_int(p + "rope.scaling.original_context_length", hp.n_ctx_train);
  if (r.n_ctx_orig < 0 || (r.type == RopeScaling::Type::Yarn && r.n_ctx_orig == 0))
    fail("{}: {}rope.scaling.original_context_length must be positive", f.path(), p);
  r.attn_factor = (float)f.get_float(p + "rope.scaling.attn_factor", 1.0);
  r.beta_fast = (float)f.get_float(p + "rope.scaling.yarn_beta_fast", 32.0);
  r.beta_slow = (float)f.get_float(p + "rope.scaling.yarn_beta_slow", 1.0);
  // Converters store 0.1 * mscale_all_dim under this name (llama.cpp undoes the 0.1 the same way).
  r.yarn_log_mul = (float)(f.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1);
  if (!(r.attn_factor > 0) || !(r.beta_fast > 0) || !(r.beta_slow > 0) ||
      !std::isfinite(r.yarn_log_mul))
    fail("{}: {}rope.scaling attn_factor / yarn_beta_fast / yarn_beta_slow must be positive",
         f.path(), p);
}

void load_moe_routing(const GgufFile& f, HParams& hp, MoeRouting::Gating default_gating) {
  const std::string p = hp.arch_name + ".";
  MoeRouting& r = hp.routing;
  const int64_t g = f.get_int(p + "expert_gating_func", 0);
  if (g == 0)
    r.gating = default_gating;
  else if (g == (int)MoeRouting::Gating::Softmax || g == (int)MoeRouting::Gating::Sigmoid)
    r.gating = (MoeRouting::Gating)g;
  else
    fail("{}: {}expert_gating_func = {} is not supported (1 softmax, 2 sigmoid)", f.path(), p, g);
  const double scale = f.get_float(p + "expert_weights_scale", 0.0);
  if (!(scale >= 0) || !std::isfinite(scale))
    fail("{}: {}expert_weights_scale = {} must be a non-negative number", f.path(), p, scale);
  r.weights_scale = scale == 0.0 ? 1.0f : (float)scale;
  r.n_group = (int)hparam_count(f, hp, "expert_group_count", 1);
  r.n_group_used = (int)hparam_count(f, hp, "expert_group_used_count", r.n_group);
  if (r.n_group == 0) r.n_group = 1;
  if (r.n_group_used == 0) r.n_group_used = r.n_group;
  if (r.n_group > 1 && (hp.n_expert % r.n_group != 0 || r.n_group_used > r.n_group ||
                        hp.n_expert_used > r.n_group_used * (hp.n_expert / r.n_group)))
    fail(
        "{}: {}expert_group_count = {} / expert_group_used_count = {} do not fit {} experts, "
        "top-{}",
        f.path(), p, r.n_group, r.n_group_used, hp.n_expert, hp.n_expert_used);
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

HParams load_hparams(const GgufFile& f) {
  HParams hp;
  hp.arch_name = f.get_string("general.architecture");
  hp.arch = &find_arch(hp.arch_name);
  const std::string p = hp.arch_name + ".";
  hp.n_embd = hparam_positive(f, hp, "embedding_length");
  hp.n_layer = (int)hparam_positive(f, hp, "block_count");
  // Next-token-prediction (MTP) blocks are stored after the trunk and counted in block_count;
  // generation does not run them.
  hp.n_layer_nextn = (int)hparam_count(f, hp, "nextn_predict_layers", 0);
  if (hp.n_layer_nextn >= hp.n_layer)
    fail("{}: {}nextn_predict_layers = {} leaves no layers of block_count = {}", f.path(), p,
         hp.n_layer_nextn, hp.n_layer);
  hp.n_layer -= hp.n_layer_nextn;
  hp.n_head = (int)hparam_positive(f, hp, "attention.head_count");
  const std::string kv_key = p + "attention.head_count_kv";
  if (const GgufValue* v = f.find(kv_key); v && v->type == GgufType::ARRAY) {
    const std::vector<int64_t> a = f.get_int_array(kv_key);
    if ((int64_t)a.size() != hp.n_layer)
      fail("{}: {} has {} entries for {} layers", f.path(), kv_key, a.size(), hp.n_layer);
    bool uniform = true;
    for (int64_t n : a) {
      if (n <= 0 || n > hp.n_head || hp.n_head % n != 0)
        fail("{}: {} entry {} must divide attention.head_count {}", f.path(), kv_key, n, hp.n_head);
      hp.n_head_kv = std::max(hp.n_head_kv, (int)n);
      uniform &= n == a[0];
    }
    if (!uniform) hp.n_head_kv_layers.assign(a.begin(), a.end());
  } else {
    hp.n_head_kv = (int)hparam_positive(f, hp, "attention.head_count_kv", hp.n_head);
  }
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
