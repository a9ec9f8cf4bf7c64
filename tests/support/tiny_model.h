#pragma once
// Builds tiny random GGUF models of each supported architecture for the tests, and keeps the
// exact float values stored (after any quantization round trip) for the float64 reference.
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace moeflow::test {

struct TinySpec {
  std::string arch = "llama";
  int64_t n_vocab = 96, n_embd = 64;
  int n_layer = 2, n_head = 4, n_head_kv = 2;
  int64_t head_dim = 16;  // written as key_length/value_length when != n_embd / n_head
  int64_t n_rot = 0;      // 0: head_dim
  int n_expert = 6, top_k = 2;
  int64_t n_ff_exp = 32, n_ff_shexp = 64;
  float rope_base = 10000.0f, eps = 1e-5f;
  bool tie_output = false;
  bool fused_gate_up = false;
  int weights_norm = -1;                 // -1: key absent
  GgmlType weight_type = GgmlType::F32;  // attention + expert matrices
  GgmlType embd_type = GgmlType::F32;
  uint32_t seed = 1;
};

struct TinyTensor {
  std::vector<int64_t> dims;
  std::vector<float> v;  // values as the engine will see them
};

using TinyWeights = std::map<std::string, TinyTensor>;

inline bool arch_has_bias(const std::string& a) { return a == "qwen2moe"; }
inline bool arch_has_shexp(const std::string& a) { return a == "qwen2moe"; }

// Writes the model to `path`; returns the stored tensor values.
inline TinyWeights write_tiny_model(const TinySpec& s, const std::string& path) {
  std::mt19937 rng(s.seed);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  GgufWriter w;
  TinyWeights tw;
  const std::string a = s.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "tiny-" + a);
  w.set_u32(a + ".context_length", 256);
  w.set_u32(a + ".embedding_length", (uint32_t)s.n_embd);
  w.set_u32(a + ".block_count", (uint32_t)s.n_layer);
  w.set_u32(a + ".feed_forward_length", (uint32_t)s.n_ff_exp);
  w.set_u32(a + ".attention.head_count", (uint32_t)s.n_head);
  w.set_u32(a + ".attention.head_count_kv", (uint32_t)s.n_head_kv);
  if (s.head_dim != s.n_embd / s.n_head) {
    w.set_u32(a + ".attention.key_length", (uint32_t)s.head_dim);
    w.set_u32(a + ".attention.value_length", (uint32_t)s.head_dim);
  }
  if (s.n_rot) w.set_u32(a + ".rope.dimension_count", (uint32_t)s.n_rot);
  w.set_f32(a + ".rope.freq_base", s.rope_base);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", s.eps);
  w.set_u32(a + ".expert_count", (uint32_t)s.n_expert);
  w.set_u32(a + ".expert_used_count", (uint32_t)s.top_k);
  if (a != "llama") w.set_u32(a + ".expert_feed_forward_length", (uint32_t)s.n_ff_exp);
  if (arch_has_shexp(a))
    w.set_u32(a + ".expert_shared_feed_forward_length", (uint32_t)s.n_ff_shexp);
  if (s.weights_norm >= 0) w.set_bool(a + ".expert_weights_norm", s.weights_norm == 1);

  auto add = [&](const std::string& name, std::vector<int64_t> dims, GgmlType type, float scale,
                 float offset = 0.0f) {
    int64_t n = 1;
    for (auto d : dims) n *= d;
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * U(rng);
    const int64_t cols = dims[0];
    const size_t rb = row_bytes(type, cols);
    const int64_t rows = n / cols;
    std::vector<uint8_t> raw(rb * rows);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(type, v.data() + r * cols, raw.data() + r * rb, cols);
      dequantize_row(type, raw.data() + r * rb, v.data() + r * cols, cols);
    }
    w.add_tensor(name, type, dims, raw.data(), raw.size());
    tw[name] = {dims, v};
  };
  const int64_t d = s.n_embd, hd = s.head_dim, qd = s.n_head * hd, kd = s.n_head_kv * hd;
  const GgmlType wt = s.weight_type;
  add("token_embd.weight", {d, s.n_vocab}, s.embd_type, 1.0f);
  add("output_norm.weight", {d}, GgmlType::F32, 0.2f, 1.0f);
  if (!s.tie_output) add("output.weight", {d, s.n_vocab}, wt, 1.0f / std::sqrt((float)d));
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const float sd = 1.0f / std::sqrt((float)d);
    add(b + "attn_norm.weight", {d}, GgmlType::F32, 0.2f, 1.0f);
    add(b + "ffn_norm.weight", {d}, GgmlType::F32, 0.2f, 1.0f);
    add(b + "attn_q.weight", {d, qd}, wt, 2.0f * sd);
    add(b + "attn_k.weight", {d, kd}, wt, 2.0f * sd);
    add(b + "attn_v.weight", {d, kd}, wt, sd);
    add(b + "attn_output.weight", {qd, d}, wt, 1.0f / std::sqrt((float)qd));
    if (arch_has_bias(a)) {
      add(b + "attn_q.bias", {qd}, GgmlType::F32, 0.3f);
      add(b + "attn_k.bias", {kd}, GgmlType::F32, 0.3f);
      add(b + "attn_v.bias", {kd}, GgmlType::F32, 0.3f);
    }
    if (a == "qwen3moe") {
      add(b + "attn_q_norm.weight", {hd}, GgmlType::F32, 0.2f, 1.0f);
      add(b + "attn_k_norm.weight", {hd}, GgmlType::F32, 0.2f, 1.0f);
    } else if (a == "olmoe") {
      add(b + "attn_q_norm.weight", {qd}, GgmlType::F32, 0.2f, 1.0f);
      add(b + "attn_k_norm.weight", {kd}, GgmlType::F32, 0.2f, 1.0f);
    }
    add(b + "ffn_gate_inp.weight", {d, s.n_expert}, GgmlType::F32, 3.0f * sd);
    const int64_t ff = s.n_ff_exp;
    if (s.fused_gate_up) {
      add(b + "ffn_gate_up_exps.weight", {d, 2 * ff, s.n_expert}, wt, 2.0f * sd);
    } else {
      add(b + "ffn_gate_exps.weight", {d, ff, s.n_expert}, wt, 2.0f * sd);
      add(b + "ffn_up_exps.weight", {d, ff, s.n_expert}, wt, 2.0f * sd);
    }
    add(b + "ffn_down_exps.weight", {ff, d, s.n_expert}, wt, 1.0f / std::sqrt((float)ff));
    if (arch_has_shexp(a)) {
      const int64_t fs = s.n_ff_shexp;
      add(b + "ffn_gate_inp_shexp.weight", {d}, GgmlType::F32, sd);
      add(b + "ffn_gate_shexp.weight", {d, fs}, wt, 2.0f * sd);
      add(b + "ffn_up_shexp.weight", {d, fs}, wt, 2.0f * sd);
      add(b + "ffn_down_shexp.weight", {fs, d}, wt, 1.0f / std::sqrt((float)fs));
    }
  }
  w.write(path);
  return tw;
}

}  // namespace moeflow::test
