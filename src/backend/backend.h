#pragma once
// The ops the forward pass needs, behind one interface. The model code (model/) is written
// once against it; backend/cpu/ implements it with the SIMD kernels and the thread pool, a
// CUDA backend implements it with device kernels. tests/backend runs every op of every
// backend present against a float64 reference.
//
// Conventions (see core/tensor.h): activations are float32 matrices [rows][cols] whose rows
// may be strided; "n" rows are tokens unless said otherwise. Every view an op is given must be
// in a memory space the backend can read (`can_read`); ops are issued in order and may run
// asynchronously on the backend's own stream: results are visible to the host only through
// `read_f32`/`copy` into host memory or after `synchronize()`. Index and weight arrays passed
// as spans live in host memory (the MoE planner decides on the host).
//
// Exactness: the CPU backend is the reference; its ops reproduce the arithmetic of the
// kernels bit for bit whatever the thread count. Other backends document their tolerance.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/tensor.h"

namespace moeflow {

enum class RopeMode : uint8_t {
  Normal,  // rotates pairs (2i, 2i+1) (GGUF converters permute llama's Q/K rows for it)
  NeoX,    // rotates pairs (i, i + n_rot/2)
};

struct RopeParams {
  RopeMode mode = RopeMode::Normal;
  int64_t n_rot = 0;  // leading dims of each head that rotate (partial RoPE when < head size)
  float freq_base = 10000.0f;
  // Scaling hooks (all off by default: plain RoPE).
  float freq_scale = 1.0f;  // linear position interpolation: theta *= freq_scale
  // YaRN: 0 = off; otherwise the ramp between interpolated and extrapolated frequencies over
  // the dims whose wavelength lies between beta_fast and beta_slow rotations in n_ctx_orig,
  // with attn_factor scaling the rotated values (mscale).
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int64_t n_ctx_orig = 0;
  // LongRoPE / llama3-style per-pair divisors of the frequency (n_rot / 2 floats in a space the
  // backend reads), or null.
  const float* freq_factors = nullptr;
  bool plain() const {
    return freq_scale == 1.0f && ext_factor == 0.0f && attn_factor == 1.0f && !freq_factors;
  }
};

struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;  // grouped-query attention: n_head / n_head_kv query heads share one kv head
  int64_t head_dim = 0;    // q and k head size
  int64_t head_dim_v = 0;  // v head size
  float scale = 0.0f;      // logit scale (usually 1/sqrt(head_dim))
  // Sliding window: the query at position p sees keys in (p - window, p]; 0 = the whole prefix.
  int64_t window = 0;
  // Attention sinks: one extra logit per head that joins the softmax's denominator and adds no
  // value (n_head floats, backend space), or null.
  const float* sinks = nullptr;
};

enum class GluKind : uint8_t {
  SwiGLU,     // silu(gate) * up
  GeGLU,      // gelu(gate) * up (tanh approximation)
  SwiGLUOai,  // gpt-oss: gate clamped above at limit, up clamped to [-limit, limit],
              // gate * sigmoid(alpha * gate) * (up + 1)
};

struct GluParams {
  GluKind kind = GluKind::SwiGLU;
  float limit = 0.0f;  // clamp (SwiGLUOai); 0 = none
  float alpha = 1.702f;
};

// Routing as data: how a router's logits become each token's experts and weights.
struct RoutingSpec {
  // SparseMixer: Phi-3.5-MoE's router at inference. Rank r takes the best logit m among the
  // experts not yet chosen; its weight is its softmax over those of them whose logits s are close
  // to m, (m - s) / max(|s|, m) <= 2 * jitter_eps (the others count as -inf). Selection is plain
  // top-k; the weights are neither renormalised afterwards nor a softmax over all experts.
  enum class Gating : uint8_t { Softmax, Sigmoid, SparseMixer };
  Gating gating = Gating::Softmax;
  float jitter_eps = 0.01f;  // SparseMixer only
  // Softmax over the k selected logits only (gpt-oss, Mixtral's formulation) instead of over all
  // experts before selection. Selection is the same; the weights differ unless renormalised.
  bool softmax_after_topk = false;
  // Group-limited selection (DeepSeek): experts in n_group equal groups, only the topk_group
  // best groups compete; a group's score is the sum of its group_top best selection scores
  // (DeepSeek-V2: 1, the maximum; V3: 2).
  int n_group = 1;
  int topk_group = 1;
  int group_top = 1;
  bool norm_weights = false;  // renormalise the k weights to sum 1
  float scale = 1.0f;         // routed scaling factor applied to the weights after that
};

enum class GateFn : uint8_t { None, Sigmoid };

// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): n_v_heads heads, each a state matrix
// S [head_k][head_v] per sequence; query/key heads (n_k_heads, head_k dims) serve several value
// heads (head_v dims). Per token t and value head h, with kh its key head:
//   q, k = L2-normalised (x * rsqrt(sum x^2 + l2_eps)), q *= 1/sqrt(head_k)
//   beta = sigmoid(b[h]), g = A[h] * softplus(a[h] + dt_bias[h])   (A = -exp(A_log) < 0)
//   S *= exp(g);  S += k (x) ((v - S^T k) * beta);  out = S^T q
struct DeltaNetParams {
  int n_k_heads = 0, n_v_heads = 0;
  int64_t head_k = 0, head_v = 0;
  // Which key head value head h reads: h / (n_v / n_k) (grouped: transformers' repeat_interleave,
  // qwen3next files) or h % n_k (tiled: qwen35moe files, whose converter reorders value heads).
  bool tiled = false;
  float l2_eps = 1e-6f;
  const float* A = nullptr;        // n_v_heads floats, backend space: -exp(A_log)
  const float* dt_bias = nullptr;  // n_v_heads floats, backend space
};

// The shape contracts of conv1d_silu and gated_delta_net (below), checked alike by every backend
// after its own memory-space and type checks: throws naming what disagrees.
void check_conv1d_silu_shapes(const TensorView& x, const TensorView& state, const TensorView& w,
                              const TensorView& out);
void check_gated_delta_net_shapes(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& a, const TensorView& b, const TensorView& state,
                                  const TensorView& out, const DeltaNetParams& p);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Where the backend's own buffers (activations, KV cache, adopted weights) live.
  virtual MemSpace space() const = 0;
  virtual bool can_read(MemSpace s) const = 0;
  virtual Allocator& allocator() = 0;

  // A weight for the forward pass: the CPU uses `w` where it is (the mmap); a device backend
  // copies it to its memory once and returns the copy's view (kept alive by the backend).
  virtual TensorView adopt_weight(const TensorView& w) = 0;
  // A table the forward pass only reads rows of (get_rows: the token embedding when no matmul
  // shares it). By default adopted like any weight.
  virtual TensorView adopt_lookup_table(const TensorView& w) { return adopt_weight(w); }

  // --- data movement ---
  // dst = src, same shape (rows may be strided on both sides); any pair of spaces.
  virtual void copy(TensorView dst, const TensorView& src) = 0;
  // Pointer to the float32 contents of `v` (contiguous rows) readable on the host: `v`'s own
  // data when the host can read it, else a copy in `staging` (waits for the producing ops).
  virtual const float* read_f32(const TensorView& v, std::vector<float>& staging) = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() = 0;

  // --- linear algebra ---
  // y[t][r] = sum_c w[r][c] * x[t][c]: w is [rows][cols] of any supported block type, x is
  // [n][cols] float32, y [n][rows]. One token is a matrix-vector product.
  virtual void matmul(const TensorView& w, const TensorView& x, TensorView y) = 0;
  // One matmul per head of a stacked weight: for h < w.ne[2], y_h = w_h x_h, where w_h is the
  // [rows][cols] block h (w.nb[2] bytes apart), x_h the columns [h * x_step, + cols) and y_h
  // the columns [h * y_step, + rows) of x and y, which are given as head 0's column views
  // (multi-head latent attention's per-head absorptions). Same bits as the per-head matmuls;
  // by default it is exactly those, and the CPU backend runs a token's heads as one dispatch.
  virtual void matmul_heads(const TensorView& w, const TensorView& x, int64_t x_step, TensorView y,
                            int64_t y_step);
  // out[t] = dequantized table row ids[t] (embedding lookup).
  virtual void get_rows(const TensorView& table, std::span<const int32_t> ids, TensorView out) = 0;

  // --- normalisation (rows of x; out may be x) ---
  virtual void rms_norm(const TensorView& x, const float* weight, TensorView out, float eps) = 0;
  virtual void layer_norm(const TensorView& x, const float* weight, const float* bias,
                          TensorView out, float eps) = 0;

  // --- position and attention ---
  // Rotates the first p.n_rot dims of each of n_head heads of head_dim floats in every row of
  // x ([n][n_head * head_dim], or a strided view); row t is at position pos0 + t.
  virtual void rope(TensorView x, int n_head, int64_t head_dim, int64_t pos0,
                    const RopeParams& p) = 0;
  // Causal attention of n query rows at positions pos0.. over the cached keys/values of
  // positions 0..pos0+n-1. q [n][n_head*head_dim]; k, v [n_ctx][...] views of one layer's cache
  // (row t = position t; a kv head h at column h*head_dim); out [n][n_head*head_dim_v].
  virtual void attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         TensorView out, int64_t pos0, const AttentionParams& p) = 0;

  // --- element-wise ---
  // out = act(gate) * up, row by row ([m][ff] each, possibly halves of one fused matrix).
  virtual void glu(const TensorView& gate, const TensorView& up, TensorView out,
                   const GluParams& p) = 0;
  // x += y; y with one row is added to every row of x (a bias).
  virtual void add(TensorView x, const TensorView& y) = 0;
  // acc += s * x
  virtual void scale_add(TensorView acc, const TensorView& x, float s) = 0;
  // x *= s (Gemma's embedding scale and per-layer output scale).
  virtual void scale(TensorView x, float s) = 0;
  // x = cap * tanh(x / cap): Gemma's soft-capping of the final logits (cap > 0).
  virtual void softcap(TensorView x, float cap) = 0;
  // acc[t] += f(gate[t]) * x[t]; gate is [n][1] (a shared expert's gate logit per token).
  virtual void gated_add(TensorView acc, const TensorView& x, const TensorView& gate, GateFn f) = 0;
  // x *= sigmoid(gate), element by element ([m][d] each; the attention output gate).
  virtual void sigmoid_mul(TensorView x, const TensorView& gate);

  // --- recurrent layers (gated DeltaNet). A backend that has them says so; the others fail
  // naming the op, and ForwardContext refuses a model with such layers on them up front. ---
  virtual bool has_recurrent_ops() const { return false; }
  // Causal depthwise convolution of kernel K over the channels of x ([n][C]) continuing from
  // `state` ([K-1][C], the previous inputs, oldest first), then silu:
  //   out[t][c] = silu(sum_j w[c][j] * xx[t+j][c]), xx = state rows then x rows;
  // `state` becomes the last K-1 rows of xx. w is float32 [C][K]. out may not alias x.
  virtual void conv1d_silu(const TensorView& x, TensorView state, const TensorView& w,
                           TensorView out);
  // The gated delta rule over n tokens, one token after the other (module comment of
  // DeltaNetParams): q, k [n][n_k_heads*head_k], v [n][n_v_heads*head_v], a, b [n][n_v_heads],
  // state [n_v_heads*head_k][head_v] (updated), out [n][n_v_heads*head_v].
  virtual void gated_delta_net(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& a, const TensorView& b, TensorView state,
                               TensorView out, const DeltaNetParams& p);

  // --- mixture of experts ---
  // Each token's experts and weights from its router logits (n x n_expert): experts/weights get
  // n x k entries in rank order (ties: lower expert first), probs the n x n_expert gate
  // probabilities before selection (softmax or sigmoid). `bias` (n_expert floats, host) is
  // added to the scores for selection only, or null. Outputs are host memory.
  virtual void route(const TensorView& logits, const RoutingSpec& spec, const float* bias, int k,
                     int32_t* experts, float* weights, float* probs);
  // dst[j] = src[idx[j]]
  virtual void gather_rows(const TensorView& src, std::span<const int32_t> idx, TensorView dst) = 0;
  // dst[idx[j]] = src[j]
  virtual void scatter_rows(TensorView dst, std::span<const int32_t> idx,
                            const TensorView& src) = 0;
  // out[t] = sum over r < k with keep[t*k+r] of weights[t*k+r] * slots[t*k+r], in rank order
  // (zero when nothing is kept). slots is [n*k][d]; keep may be empty (all kept).
  virtual void moe_combine(TensorView out, const TensorView& slots, std::span<const float> weights,
                           std::span<const uint8_t> keep, int k) = 0;

 protected:
  std::vector<float> route_staging_;
};

// Head h's [rows][cols] block of a stacked weight (ne[2] heads, nb[2] bytes apart): matmul_heads'
// per-head weight.
TensorView head_block(const TensorView& stack, int64_t h);

// The routing rule of Backend::route on host memory (what every backend's route computes):
// n rows of n_expert logits -> n x k experts and weights, n x n_expert probabilities.
void route_on_host(const float* logits, int n, int n_expert, const RoutingSpec& spec,
                   const float* bias, int k, int32_t* experts, float* weights, float* probs);

// Scratch in the backend's space that grows to the largest size asked for (activations).
class BackendScratch {
 public:
  explicit BackendScratch(Backend& b) : backend_(&b) {}
  // A float32 [rows][cols] view of at least that much memory; contents are not kept when it grows.
  TensorView f32(int64_t cols, int64_t rows);
  size_t bytes() const { return buf_.size(); }

 private:
  Backend* backend_;
  Buffer buf_;
};

}  // namespace moeflow
