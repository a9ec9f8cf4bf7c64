#include "model/weights.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/tensor_names.h"
#include "model/arch/arch.h"
#include "quant/quant.h"

namespace moeflow {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

void check_type(const GgufFile& f, const GgufTensorInfo& t) {
  if (!type_traits(t.type).supported)
    fail("{}: tensor '{}' has type {}, which moeflow cannot compute with", f.path(), t.name,
         type_name(t.type));
}

// Trailing dimensions of 1 are ignored so that [n] and [n, 1] both match a vector of n.
bool same_shape(std::vector<int64_t> got, std::vector<int64_t> want) {
  while (got.size() > 1 && got.back() == 1) got.pop_back();
  while (want.size() > 1 && want.back() == 1) want.pop_back();
  return got == want;
}

const GgufTensorInfo* find(const GgufFile& f, const std::string& name, bool required) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t && required) fail("{}: missing tensor '{}'", f.path(), name);
  return t;
}

}  // namespace

bool ModelLoader::has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

TensorView ModelLoader::matrix(const std::string& name, int64_t cols, int64_t rows, bool required) {
  const GgufTensorInfo* t = find(f_, name, required);
  if (!t) return {};
  check_type(f_, *t);
  if (!same_shape(t->dims, {cols, rows}))
    fail("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, dims_str(t->dims),
         dims_str({cols, rows}));
  if (cols % type_traits(t->type).block_size != 0)
    fail("{}: tensor '{}' row length {} is not a multiple of the {} block size", f_.path(), name,
         cols, type_name(t->type));
  w_.non_expert_bytes += t->nbytes;
  return matrix_view(f_.data(*t), t->type, cols, rows);
}

TensorView ModelLoader::vector(const std::string& name, int64_t n, bool required) {
  const GgufTensorInfo* t = find(f_, name, required);
  if (!t) return {};
  check_type(f_, *t);
  if (!same_shape(t->dims, {n}))
    fail("{}: tensor '{}' has shape {}, expected [{}]", f_.path(), name, dims_str(t->dims), n);
  if (n % type_traits(t->type).block_size != 0)
    fail("{}: tensor '{}' length {} is not a multiple of the {} block size", f_.path(), name, n,
         type_name(t->type));
  std::vector<float>& out = w_.vectors->emplace_back(n);
  dequantize_row(t->type, f_.data(*t), out.data(), n);
  w_.non_expert_bytes += t->nbytes;
  return f32_view(out.data(), n, 1);
}

TensorView ModelLoader::vectors(const std::string& name, int64_t n, int64_t count, bool required) {
  const GgufTensorInfo* t = find(f_, name, required);
  if (!t) return {};
  check_type(f_, *t);
  if (!same_shape(t->dims, {n, count}))
    fail("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, dims_str(t->dims),
         dims_str({n, count}));
  if (n % type_traits(t->type).block_size != 0)
    fail("{}: tensor '{}' row length {} is not a multiple of the {} block size", f_.path(), name, n,
         type_name(t->type));
  w_.non_expert_bytes += t->nbytes;
  if (t->type == GgmlType::F32) return matrix_view(f_.data(*t), GgmlType::F32, n, count);
  std::vector<float>& out = w_.vectors->emplace_back(n * count);
  const size_t rb = row_bytes(t->type, n);
  for (int64_t r = 0; r < count; ++r)
    dequantize_row(t->type, f_.data(*t) + r * rb, out.data() + r * n, n);
  return f32_view(out.data(), n, count);
}

TensorView ModelLoader::own_vector(std::vector<float> values) {
  const int64_t n = (int64_t)values.size();
  std::vector<float>& out = w_.vectors->emplace_back(std::move(values));
  return f32_view(out.data(), n, 1);
}

TensorView ModelLoader::layer_matrix(int il, const std::string& name, int64_t cols, int64_t rows,
                                     bool required) {
  return matrix(layer_tensor_name(il, name), cols, rows, required);
}

TensorView ModelLoader::layer_vector(int il, const std::string& name, int64_t n, bool required) {
  return vector(layer_tensor_name(il, name), n, required);
}

void ModelLoader::norms(int il, LayerWeights& L, NormKind kind, const char* ffn_norm_name) {
  const int64_t d = hp_.n_embd;
  const std::string ffn = ffn_norm_name;
  L.attn_norm = layer_vector(il, "attn_norm.weight", d);
  L.ffn_norm = layer_vector(il, ffn + ".weight", d);
  if (kind == NormKind::Layer) {
    L.attn_norm_bias = layer_vector(il, "attn_norm.bias", d);
    L.ffn_norm_bias = layer_vector(il, ffn + ".bias", d);
  }
}

TensorView ModelLoader::stacked(const std::string& name, int64_t cols, int64_t rows, int64_t n) {
  const GgufTensorInfo* t = find(f_, name, true);
  check_type(f_, *t);
  if (!same_shape(t->dims, {cols, rows, n}))
    fail("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, dims_str(t->dims),
         dims_str({cols, rows, n}));
  if (cols % type_traits(t->type).block_size != 0)
    fail("{}: tensor '{}' row length {} is not a multiple of the {} block size", f_.path(), name,
         cols, type_name(t->type));
  w_.non_expert_bytes += t->nbytes;
  TensorView v = matrix_view(f_.data(*t), t->type, cols, rows);
  v.n_dims = 3;
  v.ne[2] = n;
  v.nb[2] = v.nb[1] * (size_t)rows;
  v.nb[3] = v.nb[2] * (size_t)n;
  return v;
}

void ModelLoader::mla_attention(int il, LayerWeights& L, const MlaSpec& m) {
  const int64_t d = hp_.n_embd, H = hp_.n_head, q_dim = H * (m.nope + m.rope);
  if (m.q_lora_rank > 0) {
    L.wq_a = layer_matrix(il, "attn_q_a.weight", d, m.q_lora_rank);
    L.q_a_norm = layer_vector(il, "attn_q_a_norm.weight", m.q_lora_rank);
    L.wq_b = layer_matrix(il, "attn_q_b.weight", m.q_lora_rank, q_dim);
  } else {
    L.wq = layer_matrix(il, "attn_q.weight", d, q_dim);
  }
  L.wkv_a = layer_matrix(il, "attn_kv_a_mqa.weight", d, m.kv_lora_rank + m.rope);
  L.kv_a_norm = layer_vector(il, "attn_kv_a_norm.weight", m.kv_lora_rank);
  L.wo = layer_matrix(il, "attn_output.weight", H * m.head_dim_v, d);
  if (hp_.mla.split_kv_b) {
    L.wk_b = stacked(layer_tensor_name(il, "attn_k_b.weight"), m.nope, m.kv_lora_rank, H);
    L.wv_b = stacked(layer_tensor_name(il, "attn_v_b.weight"), m.kv_lora_rank, m.head_dim_v, H);
    return;
  }
  // Older files: one attn_kv_b of n_head blocks [nope key rows | head_dim_v value rows] over
  // the latent. The value rows of each head are already the [head_dim_v][kv_lora] matrix the
  // absorbed form multiplies with (a view with a head stride); the key rows are needed
  // transposed, [kv_lora][nope] per head, so they are dequantized and transposed once here.
  const int64_t per = m.nope + m.head_dim_v;
  const TensorView kv_b = layer_matrix(il, "attn_kv_b.weight", m.kv_lora_rank, H * per);
  L.wv_b =
      strided_matrix_view(kv_b.row(m.nope), kv_b.type, m.kv_lora_rank, m.head_dim_v, kv_b.nb[1]);
  L.wv_b.n_dims = 3;
  L.wv_b.ne[2] = H;
  L.wv_b.nb[2] = kv_b.nb[1] * (size_t)per;
  L.wv_b.nb[3] = L.wv_b.nb[2] * (size_t)H;
  std::vector<float>& kt = w_.vectors->emplace_back((size_t)(H * m.kv_lora_rank * m.nope));
  std::vector<float> row(m.kv_lora_rank);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j = 0; j < m.nope; ++j) {
      dequantize_row(kv_b.type, kv_b.row(h * per + j), row.data(), m.kv_lora_rank);
      for (int64_t c = 0; c < m.kv_lora_rank; ++c)
        kt[(size_t)((h * m.kv_lora_rank + c) * m.nope + j)] = row[c];
    }
  L.wk_b = f32_view(kt.data(), m.nope, m.kv_lora_rank);
  L.wk_b.n_dims = 3;
  L.wk_b.ne[2] = H;
  L.wk_b.nb[2] = L.wk_b.nb[1] * (size_t)m.kv_lora_rank;
  L.wk_b.nb[3] = L.wk_b.nb[2] * (size_t)H;
}

void ModelLoader::attention(int il, LayerWeights& L, const AttentionOptions& o) {
  const int64_t d = hp_.n_embd;
  if (!hp_.n_head_kv_layers.empty())
    fail("{}: {}.attention.head_count_kv differs between layers, which {} does not support",
         f_.path(), hp_.arch_name, hp_.arch_name);
  L.wq = layer_matrix(il, "attn_q.weight", d, hp_.q_dim());
  L.wk = layer_matrix(il, "attn_k.weight", d, hp_.k_dim());
  L.wv = layer_matrix(il, "attn_v.weight", d, hp_.v_dim());
  L.wo = layer_matrix(il, "attn_output.weight", hp_.attn_out_dim(), d);
  if (o.qkv_bias) {
    L.bq = layer_vector(il, "attn_q.bias", hp_.q_dim());
    L.bk = layer_vector(il, "attn_k.bias", hp_.k_dim());
    L.bv = layer_vector(il, "attn_v.bias", hp_.v_dim());
  }
  if (o.out_bias) L.bo = layer_vector(il, "attn_output.bias", d);
  if (o.qk_norm == QkNorm::PerHead) {
    L.q_norm = layer_vector(il, "attn_q_norm.weight", hp_.head_dim);
    L.k_norm = layer_vector(il, "attn_k_norm.weight", hp_.head_dim);
  } else if (o.qk_norm == QkNorm::Full) {
    L.q_norm = layer_vector(il, "attn_q_norm.weight", hp_.q_dim());
    L.k_norm = layer_vector(il, "attn_k_norm.weight", hp_.k_dim());
  }
  if (o.sinks) L.sinks = layer_vector(il, "attn_sinks.weight", hp_.n_head);
}

void ModelLoader::moe(int il, LayerWeights& L, const MoeOptions& o) {
  const int64_t d = hp_.n_embd, E = hp_.n_expert, ff = hp_.n_ff_exp;
  L.moe = true;
  L.gate_inp = layer_matrix(il, "ffn_gate_inp.weight", d, E);
  if (o.router_bias) L.gate_inp_bias = layer_vector(il, "ffn_gate_inp.bias", E);
  if (o.selection_bias) L.exp_probs_bias = layer_vector(il, "exp_probs_b.bias", E);
  auto check3 = [&](ExpertTensor kind, std::vector<int64_t> want) {
    const std::string name = expert_tensor_name(il, kind);
    const GgufTensorInfo* t = find(f_, name, true);
    check_type(f_, *t);
    if (t->dims != want)
      fail("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, dims_str(t->dims),
           dims_str(want));
  };
  if (has(expert_tensor_name(il, ExpertTensor::GateUp))) {
    check3(ExpertTensor::GateUp, {d, 2 * ff, E});
  } else {
    check3(ExpertTensor::Gate, {d, ff, E});
    check3(ExpertTensor::Up, {d, ff, E});
  }
  check3(ExpertTensor::Down, {ff, d, E});
  if (o.expert_bias) {
    L.exp_gate_bias = vectors(expert_tensor_name(il, ExpertTensor::Gate, "bias"), ff, E);
    L.exp_up_bias = vectors(expert_tensor_name(il, ExpertTensor::Up, "bias"), ff, E);
    L.exp_down_bias = vectors(expert_tensor_name(il, ExpertTensor::Down, "bias"), d, E);
  }
  if (o.shared) {
    const int64_t fs = o.n_ff_shexp;
    if (o.shared_gate) L.gate_inp_shexp = layer_matrix(il, "ffn_gate_inp_shexp.weight", d, 1);
    L.shexp.gate = layer_matrix(il, "ffn_gate_shexp.weight", d, fs);
    L.shexp.up = layer_matrix(il, "ffn_up_shexp.weight", d, fs);
    L.shexp.down = layer_matrix(il, "ffn_down_shexp.weight", fs, d);
  }
}

void ModelLoader::dense_ffn(int il, LayerWeights& L) {
  if (hp_.n_ff <= 0)
    fail("{}: layer {} is dense but {}.feed_forward_length is missing", f_.path(), il,
         hp_.arch_name);
  L.ffn.gate = layer_matrix(il, "ffn_gate.weight", hp_.n_embd, hp_.n_ff);
  L.ffn.up = layer_matrix(il, "ffn_up.weight", hp_.n_embd, hp_.n_ff);
  L.ffn.down = layer_matrix(il, "ffn_down.weight", hp_.n_ff, hp_.n_embd);
}

void ModelLoader::globals(NormKind kind) {
  const GgufTensorInfo* te = find(f_, "token_embd.weight", true);
  if (te->dims.size() != 2 || te->dims[0] != hp_.n_embd)
    fail("{}: tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", f_.path(),
         dims_str(te->dims), hp_.n_embd);
  const int64_t n_vocab = te->dims[1];
  w_.token_embd = matrix("token_embd.weight", hp_.n_embd, n_vocab);
  w_.output_norm = vector("output_norm.weight", hp_.n_embd);
  if (kind == NormKind::Layer) w_.output_norm_bias = vector("output_norm.bias", hp_.n_embd);
  w_.output = matrix("output.weight", hp_.n_embd, n_vocab, false);
  if (!w_.output) w_.output = w_.token_embd;
}

void ModelLoader::apply_rope_scaling(RopeParams& r, float yarn_mscale) const {
  const RopeScaling& sc = hp_.rope_scaling;
  if (sc.type == RopeScaling::Type::None) return;
  // LongRoPE is a per-pair factor table (phimoe's rope_factors_* tensors), not this formula.
  if (sc.type == RopeScaling::Type::LongRope)
    fail(
        "{}: {}.rope.scaling.type longrope is not supported for this architecture (none, linear, "
        "yarn)",
        f_.path(), hp_.arch_name);
  r.freq_scale = 1.0f / sc.factor;
  r.attn_factor = sc.attn_factor;
  if (sc.type != RopeScaling::Type::Yarn) return;
  // llama.cpp's YaRN: the rotation is scaled by mscale(factor, yarn_mscale) /
  // mscale(factor, log_mul) (transformers' attention_factor); the RoPE op multiplies by
  // 1 + 0.1 ln(factor) itself, so that is divided out here.
  auto mscale = [&](float m) {
    return sc.factor <= 1.0f ? 1.0f : 0.1f * m * std::log(sc.factor) + 1.0f;
  };
  const float ratio =
      sc.yarn_log_mul != 0.0f ? mscale(yarn_mscale) / mscale(sc.yarn_log_mul) : mscale(1.0f);
  r.ext_factor = 1.0f;
  r.attn_factor = ratio / (1.0f + 0.1f * std::log(sc.factor)) * sc.attn_factor;
  r.beta_fast = sc.beta_fast;
  r.beta_slow = sc.beta_slow;
  r.n_ctx_orig = sc.n_ctx_orig;
}

void ModelLoader::apply_routing(RoutingSpec& r) const {
  const MoeRouting& m = hp_.routing;
  r.gating = m.gating == MoeRouting::Gating::Sigmoid ? RoutingSpec::Gating::Sigmoid
                                                     : RoutingSpec::Gating::Softmax;
  r.n_group = m.n_group;
  r.topk_group = m.n_group_used;
  r.norm_weights = hp_.norm_topk;
  r.scale = m.weights_scale;
}

LayerSpec ModelLoader::default_spec(RopeMode rope) const {
  LayerSpec s;
  s.attn.rope.mode = rope;
  s.attn.rope.n_rot = hp_.n_rot;
  s.attn.rope.freq_base = hp_.rope_base;
  s.attn.params.n_head = hp_.n_head;
  s.attn.params.n_head_kv = hp_.n_head_kv;
  s.attn.params.head_dim = hp_.head_dim;
  s.attn.params.head_dim_v = hp_.head_dim_v;
  s.attn.params.scale = 1.0f / std::sqrt((float)hp_.head_dim);
  s.moe.routing.norm_weights = hp_.norm_topk;
  // rope.scaling.* as llama.cpp applies it.
  const RopeScaling& rs = hp_.rope_scaling;
  RopeParams& r = s.attn.rope;
  r.attn_factor = rs.attn_factor;
  if (rs.type == RopeScaling::Type::Linear || rs.type == RopeScaling::Type::Yarn)
    r.freq_scale = 1.0f / rs.factor;
  if (rs.type == RopeScaling::Type::Yarn) {
    r.ext_factor = 1.0f;
    r.n_ctx_orig = rs.n_ctx_orig;
    r.beta_fast = rs.beta_fast;
    r.beta_slow = rs.beta_slow;
    // YaRN's magnitude factor is 1 + 0.1 ln(factor) for factor > 1, else 1; the rope op
    // multiplies by 1 + 0.1 ln(factor) itself, so attn_factor carries only the rest.
    const float op = 1.0f + 0.1f * std::log(rs.factor);
    const float want = rs.factor > 1.0f ? op : 1.0f;
    r.attn_factor *= want / op;
  }
  return s;
}

ModelWeights load_weights(const GgufFile& f, const HParams& hp, std::vector<LayerSpec>& specs) {
  ModelWeights w;
  ModelLoader ld(f, hp, w);
  w.layers.resize(hp.n_layer);
  specs.assign(hp.n_layer, LayerSpec{});
  hp.arch->build(ld, hp, w, specs);
  return w;
}

}  // namespace moeflow
