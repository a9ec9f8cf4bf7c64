#pragma once
// The non-expert weights of a model as tensor views into the mmap'ed GGUF, checked against the
// hyper-parameters at load, and the helpers the architecture files load them with. Small
// vectors (norms, biases) are dequantized to float once and kept by the ModelWeights. The routed
// experts are reached through an ExpertProvider, never from here (only their shapes are checked).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/hparams.h"
#include "model/layer_spec.h"

namespace moeflow {

class GgufFile;

// Weights of a dense FFN or a shared expert: gate, up, down (gate may be a fused gate_up with
// no up), and optional biases.
struct FfnWeights {
  TensorView gate, up, down;
  TensorView gate_bias, up_bias, down_bias;
  explicit operator bool() const { return (bool)gate; }
};

struct LayerWeights {
  TensorView attn_norm, attn_norm_bias, ffn_norm, ffn_norm_bias;
  TensorView wq, wk, wv, wo;
  TensorView bq, bk, bv, bo;  // empty when the arch has none
  TensorView q_norm, k_norm;  // per head (head_dim) or full (q_dim / k_dim)
  TensorView sinks;           // attention sink logits, one per head
  // Multi-head latent attention (wq above when there is no q_lora_rank).
  TensorView wq_a, q_a_norm,
      wq_b;                     // [q_lora][n_embd], RMSNorm of q_lora, [n_head*(nope+rope)][q_lora]
  TensorView wkv_a, kv_a_norm;  // [kv_lora + rope][n_embd], RMSNorm of kv_lora
  TensorView wk_b;              // n_head stacked [kv_lora][nope]: q_nope -> latent space
  TensorView wv_b;              // n_head stacked [head_dim_v][kv_lora]: latent -> values
  // Gated DeltaNet (layer_spec.h DeltaNetSpec): attn_qkv [conv channels][n_embd] and attn_gate
  // (z) [n_v*head_v][n_embd]; the beta / decay logits from ssm_beta + ssm_alpha ([n_v][n_embd]
  // each) or one ssm_ba ([2*n_v][n_embd], [beta | alpha] per key head); the convolution kernel
  // as float rows [channels][d_conv]; ssm_a = -exp(A_log) and ssm_dt (dt_bias) per value head;
  // the gated RMSNorm's weight (head_v) and ssm_out [n_embd][n_v*head_v].
  TensorView ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_ba, ssm_conv1d, ssm_a, ssm_dt, ssm_norm,
      ssm_out;
  // RoPE frequency divisors (n_rot / 2 floats): LongRoPE's short factors (rope_freqs_long
  // replaces them when the context exceeds the original one) or an architecture's own ramp.
  TensorView rope_freqs, rope_freqs_long;
  // MoE layer
  bool moe = false;
  TensorView gate_inp;        // router [n_embd -> n_expert]
  TensorView gate_inp_bias;   // router bias
  TensorView exp_probs_bias;  // selection bias (DeepSeek-V3 style): host floats, the
                              // planner selects on the host (not adopted by backends)
  TensorView gate_inp_shexp;  // [n_embd -> 1]
  // Routed experts' biases, float rows [n_expert][n_ff] / [n_expert][n_embd] (gpt-oss). They
  // stay resident with the other non-expert weights (a fraction of a percent of the experts'
  // bytes), so every provider and budget adds the same bits.
  TensorView exp_gate_bias, exp_up_bias, exp_down_bias;
  FfnWeights shexp;  // shared expert(s)
  // dense layer
  FfnWeights ffn;
  // Gemma: norms after attention / the FFN (LayerSpec::post_norms), and of the dense FFN and MoE
  // beside each other (LayerSpec::dense_beside_moe): the dense FFN's output norm, the experts'
  // input and output norms, the router's input norm (its scale / sqrt(n_embd)).
  TensorView attn_post_norm, ffn_post_norm;
  TensorView ffn_post_norm_1, ffn_pre_norm_2, ffn_post_norm_2, router_norm;
  // Per-expert factors of the routing weights (n_expert host floats, the planner's side like
  // exp_probs_bias; not adopted by backends), or empty.
  TensorView exp_weight_scale;
};

struct ModelWeights {
  TensorView token_embd;
  TensorView output_norm, output_norm_bias;
  TensorView output;       // token_embd when the model ties them
  TensorView output_bias;  // added to the logits (phimoe), or empty
  std::vector<LayerWeights> layers;
  uint64_t non_expert_bytes = 0;
  // Storage of the dequantized vectors the views above point at (a deque never moves them),
  // shared by the copies a backend adopts.
  std::shared_ptr<std::deque<std::vector<float>>> vectors =
      std::make_shared<std::deque<std::vector<float>>>();
};

// Calls f(TensorView&) on every weight view of the model (absent ones included).
template <typename F>
void for_each_view(ModelWeights& w, F&& f) {
  f(w.token_embd), f(w.output_norm), f(w.output_norm_bias), f(w.output), f(w.output_bias);
  for (LayerWeights& L : w.layers) {
    for (TensorView* v : {&L.attn_norm,
                          &L.attn_norm_bias,
                          &L.ffn_norm,
                          &L.ffn_norm_bias,
                          &L.wq,
                          &L.wk,
                          &L.wv,
                          &L.wo,
                          &L.bq,
                          &L.bk,
                          &L.bv,
                          &L.bo,
                          &L.q_norm,
                          &L.k_norm,
                          &L.sinks,
                          &L.rope_freqs,
                          &L.rope_freqs_long,
                          &L.gate_inp,
                          &L.gate_inp_bias,
                          &L.gate_inp_shexp,
                          &L.exp_gate_bias,
                          &L.exp_up_bias,
                          &L.exp_down_bias,
                          &L.wq_a,
                          &L.q_a_norm,
                          &L.wq_b,
                          &L.wkv_a,
                          &L.kv_a_norm,
                          &L.wk_b,
                          &L.wv_b,
                          &L.ssm_qkv,
                          &L.ssm_z,
                          &L.ssm_beta,
                          &L.ssm_alpha,
                          &L.ssm_ba,
                          &L.ssm_conv1d,
                          &L.ssm_a,
                          &L.ssm_dt,
                          &L.ssm_norm,
                          &L.ssm_out,
                          &L.attn_post_norm,
                          &L.ffn_post_norm,
                          &L.ffn_post_norm_1,
                          &L.ffn_pre_norm_2,
                          &L.ffn_post_norm_2,
                          &L.router_norm})
      f(*v);
    for (FfnWeights* ffn : {&L.shexp, &L.ffn})
      for (TensorView* v :
           {&ffn->gate, &ffn->up, &ffn->down, &ffn->gate_bias, &ffn->up_bias, &ffn->down_bias})
        f(*v);
  }
}

// Loading helpers shared by the architecture files. Every error names the file and tensor.
class ModelLoader {
 public:
  ModelLoader(const GgufFile& f, const HParams& hp, ModelWeights& w) : f_(f), hp_(hp), w_(w) {}
  const GgufFile& file() const { return f_; }
  const HParams& hparams() const { return hp_; }
  bool has(const std::string& name) const;

  // A [rows][cols] matrix (GGUF dims {cols, rows}); empty view when absent and not required.
  TensorView matrix(const std::string& name, int64_t cols, int64_t rows, bool required = true);
  // A vector of n elements dequantized to float; empty view when absent and not required.
  TensorView vector(const std::string& name, int64_t n, bool required = true);
  // `count` vectors of n elements each (GGUF dims {n, count}) as float rows [count][n].
  TensorView vectors(const std::string& name, int64_t n, int64_t count, bool required = true);
  // A vector of floats the architecture computed (kept by the weights, like a loaded one).
  TensorView own_vector(std::vector<float> values);

  // Layer il's "blk.<il>.<name>" versions of the above.
  TensorView layer_matrix(int il, const std::string& name, int64_t cols, int64_t rows,
                          bool required = true);
  TensorView layer_vector(int il, const std::string& name, int64_t n, bool required = true);

  // Shared layer pieces.
  struct AttentionOptions {
    bool qkv_bias = false;  // attn_{q,k,v}.bias required
    bool out_bias = false;  // attn_output.bias required
    QkNorm qk_norm = QkNorm::None;
    bool sinks = false;  // attn_sinks required
  };
  void attention(int il, LayerWeights& L, const AttentionOptions& o);
  // Multi-head latent attention: attn_q (or attn_q_a, attn_q_a_norm, attn_q_b), attn_kv_a_mqa,
  // attn_kv_a_norm, attn_k_b + attn_v_b (or the older attn_kv_b, split here: its value rows are
  // views, its key rows are transposed once into float32), attn_output.
  void mla_attention(int il, LayerWeights& L, const MlaSpec& m);
  // attn_norm / ffn_norm (+ their biases for LayerNorm); `ffn_norm_name` is the pre-FFN norm's
  // tensor name (glm4moe calls it post_attention_norm).
  void norms(int il, LayerWeights& L, NormKind kind, const char* ffn_norm_name = "ffn_norm");
  // Router, the stacked experts' shapes (checked, not loaded), and the shared expert when
  // `shared` (ffn_{gate,up,down}_shexp; `shared_gate` adds ffn_gate_inp_shexp).
  struct MoeOptions {
    bool shared = false;
    bool shared_gate = false;
    int64_t n_ff_shexp = 0;
    bool router_bias = false;
    bool selection_bias = false;  // exp_probs_b
    bool expert_bias = false;     // ffn_{gate,up,down}_exps.bias
  };
  void moe(int il, LayerWeights& L, const MoeOptions& o);
  // ffn_{gate,up,down}.weight of a dense layer (n_ff from the hyper-parameters).
  void dense_ffn(int il, LayerWeights& L);
  // token_embd, output_norm, output (tied to token_embd when absent).
  void globals(NormKind kind);

  // The spec every layer starts from: heads, sizes and 1/sqrt(head_dim) from the
  // hyper-parameters, RoPE of n_rot dims scaled as rope.scaling.* says (linear, YaRN; the
  // attention factor), SwiGLU, softmax routing of top-k.
  LayerSpec default_spec(RopeMode rope) const;
  // Applies hp.rope_scaling (linear or YaRN, llama.cpp's arithmetic) to a spec's RoPE;
  // `yarn_mscale` is YaRN's mscale (numerator of the rotation's attention factor).
  void apply_rope_scaling(RopeParams& r, float yarn_mscale = 1.0f) const;
  // The routing of hp.routing (gating, groups, scale) and hp.norm_topk on top of a spec.
  void apply_routing(RoutingSpec& r) const;

 private:
  // A 3-D tensor of n stacked [rows][cols] matrices (GGUF dims {cols, rows, n}) as a view
  // with ne[2] = n and nb[2] = the stride between them.
  TensorView stacked(const std::string& name, int64_t cols, int64_t rows, int64_t n);

  const GgufFile& f_;
  const HParams& hp_;
  ModelWeights& w_;
};

// Reads the model's tensors for its architecture (hp.arch) and fills one LayerSpec per layer.
ModelWeights load_weights(const GgufFile& f, const HParams& hp, std::vector<LayerSpec>& specs);

}  // namespace moeflow
