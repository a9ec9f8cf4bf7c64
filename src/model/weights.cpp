#include "model/weights.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
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

WeightRef matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows,
                 bool required, uint64_t* bytes = nullptr) {
  const GgufTensorInfo* t = find(f, name, required);
  if (!t) return {};
  check_type(f, *t);
  if (!same_shape(t->dims, {cols, rows}))
    fail("{}: tensor '{}' has shape {}, expected {}", f.path(), name, dims_str(t->dims),
         dims_str({cols, rows}));
  if (cols % type_traits(t->type).block_size != 0)
    fail("{}: tensor '{}' row length {} is not a multiple of the {} block size", f.path(), name,
         cols, type_name(t->type));
  WeightRef w;
  w.data = f.data(*t);
  w.type = t->type;
  w.cols = cols;
  w.rows = rows;
  w.name = name;
  if (bytes) *bytes += t->nbytes;
  return w;
}

std::vector<float> vec(const GgufFile& f, const std::string& name, int64_t n, bool required,
                       uint64_t* bytes) {
  const GgufTensorInfo* t = find(f, name, required);
  if (!t) return {};
  check_type(f, *t);
  if (!same_shape(t->dims, {n}))
    fail("{}: tensor '{}' has shape {}, expected [{}]", f.path(), name, dims_str(t->dims), n);
  if (n % type_traits(t->type).block_size != 0)
    fail("{}: tensor '{}' length {} is not a multiple of the {} block size", f.path(), name, n,
         type_name(t->type));
  std::vector<float> out(n);
  dequantize_row(t->type, f.data(*t), out.data(), n);
  *bytes += t->nbytes;
  return out;
}

void check_experts(const GgufFile& f, const HParams& hp, int il) {
  const std::string b = fmt::format("blk.{}.", il);
  const int64_t E = hp.n_expert, d = hp.n_embd, ff = hp.n_ff_exp;
  auto check3 = [&](const std::string& name, std::vector<int64_t> want) {
    const GgufTensorInfo* t = find(f, name, true);
    check_type(f, *t);
    if (t->dims != want)
      fail("{}: tensor '{}' has shape {}, expected {}", f.path(), name, dims_str(t->dims),
           dims_str(want));
  };
  if (f.find_tensor(b + "ffn_gate_up_exps.weight")) {
    check3(b + "ffn_gate_up_exps.weight", {d, 2 * ff, E});
  } else {
    check3(b + "ffn_gate_exps.weight", {d, ff, E});
    check3(b + "ffn_up_exps.weight", {d, ff, E});
  }
  check3(b + "ffn_down_exps.weight", {ff, d, E});
}

}  // namespace

ModelWeights load_weights(const GgufFile& f, const HParams& hp) {
  ModelWeights mw;
  uint64_t* nb = &mw.non_expert_bytes;
  const GgufTensorInfo* te = find(f, "token_embd.weight", true);
  if (te->dims.size() != 2 || te->dims[0] != hp.n_embd)
    fail("{}: tensor 'token_embd.weight' has shape {}, expected [{}, n_vocab]", f.path(),
         dims_str(te->dims), hp.n_embd);
  const int64_t n_vocab = te->dims[1];
  mw.token_embd = matrix(f, "token_embd.weight", hp.n_embd, n_vocab, true, nb);
  mw.output_norm = vec(f, "output_norm.weight", hp.n_embd, true, nb);
  mw.output = matrix(f, "output.weight", hp.n_embd, n_vocab, false, nb);
  if (!mw.output) mw.output = mw.token_embd;

  const ArchSpec& a = *hp.arch;
  mw.layers.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = mw.layers[il];
    const std::string b = fmt::format("blk.{}.", il);
    L.attn_norm = vec(f, b + "attn_norm.weight", hp.n_embd, true, nb);
    L.ffn_norm = vec(f, b + "ffn_norm.weight", hp.n_embd, true, nb);
    L.wq = matrix(f, b + "attn_q.weight", hp.n_embd, hp.q_dim(), true, nb);
    L.wk = matrix(f, b + "attn_k.weight", hp.n_embd, hp.k_dim(), true, nb);
    L.wv = matrix(f, b + "attn_v.weight", hp.n_embd, hp.v_dim(), true, nb);
    L.wo = matrix(f, b + "attn_output.weight", hp.attn_out_dim(), hp.n_embd, true, nb);
    if (a.qkv_bias) {
      L.bq = vec(f, b + "attn_q.bias", hp.q_dim(), true, nb);
      L.bk = vec(f, b + "attn_k.bias", hp.k_dim(), true, nb);
      L.bv = vec(f, b + "attn_v.bias", hp.v_dim(), true, nb);
    }
    if (a.qk_norm == QkNorm::PerHead) {
      L.q_norm = vec(f, b + "attn_q_norm.weight", hp.head_dim, true, nb);
      L.k_norm = vec(f, b + "attn_k_norm.weight", hp.head_dim, true, nb);
    } else if (a.qk_norm == QkNorm::Full) {
      L.q_norm = vec(f, b + "attn_q_norm.weight", hp.q_dim(), true, nb);
      L.k_norm = vec(f, b + "attn_k_norm.weight", hp.k_dim(), true, nb);
    }
    L.moe = hp.n_expert > 0 && f.find_tensor(b + "ffn_gate_inp.weight") != nullptr;
    if (L.moe) {
      L.gate_inp = matrix(f, b + "ffn_gate_inp.weight", hp.n_embd, hp.n_expert, true, nb);
      check_experts(f, hp, il);
      if (a.shared_expert) {
        L.gate_inp_shexp = matrix(f, b + "ffn_gate_inp_shexp.weight", hp.n_embd, 1, true, nb);
        L.gate_shexp = matrix(f, b + "ffn_gate_shexp.weight", hp.n_embd, hp.n_ff_shexp, true, nb);
        L.up_shexp = matrix(f, b + "ffn_up_shexp.weight", hp.n_embd, hp.n_ff_shexp, true, nb);
        L.down_shexp = matrix(f, b + "ffn_down_shexp.weight", hp.n_ff_shexp, hp.n_embd, true, nb);
      }
    } else {
      if (hp.n_expert > 0 && hp.arch_name != "llama")
        fail("{}: missing tensor '{}ffn_gate_inp.weight'", f.path(), b);
      if (hp.n_ff <= 0)
        fail("{}: layer {} is dense but {}.feed_forward_length is missing", f.path(), il,
             hp.arch_name);
      L.ffn_gate = matrix(f, b + "ffn_gate.weight", hp.n_embd, hp.n_ff, true, nb);
      L.ffn_up = matrix(f, b + "ffn_up.weight", hp.n_embd, hp.n_ff, true, nb);
      L.ffn_down = matrix(f, b + "ffn_down.weight", hp.n_ff, hp.n_embd, true, nb);
    }
  }
  return mw;
}

}  // namespace moeflow
