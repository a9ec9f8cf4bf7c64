#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/ops.h"
#include "model/attn_math.h"
#include "model/linear.h"
#include "quant/quant.h"

namespace moeflow {

Model::Model(const GgufFile& file) : file_(file), hp_(load_hparams(file)), w_(load_weights(file, hp_)) {
  hp_.n_vocab = w_.token_embd.rows;
}

bool Model::is_moe_layer(int layer) const {
  return layer >= 0 && layer < hp_.n_layer && w_.layers[layer].moe;
}

void Model::router_logits(int layer, std::span<const float> hidden, std::vector<float>& logits) const {
  if (!is_moe_layer(layer)) fail("router_logits: layer {} has no router", layer);
  if ((int64_t)hidden.size() != hp_.n_embd)
    fail("router_logits: hidden state has {} values, expected n_embd {}", hidden.size(), hp_.n_embd);
  logits.resize(hp_.n_expert);
  const WeightRef& g = w_.layers[layer].gate_inp;
  linear(g, hidden.data(), 1, logits.data(), nullptr);
}

RouterFn Model::router_fn() const {
  return [this](int layer, std::span<const float> hidden, std::vector<float>& logits) {
    router_logits(layer, hidden, logits);
  };
}

uint64_t Model::total_expert_bytes() const {
  uint64_t total = 0;
  for (int il = 0; il < hp_.n_layer; ++il) {
    for (const char* p : {"gate", "up", "down", "gate_up"}) {
      const auto* t = file_.find_tensor(fmt::format("blk.{}.ffn_{}_exps.weight", il, p));
      if (t) total += t->nbytes;
    }
  }
  return total;
}

uint64_t Model::active_expert_bytes_per_token() const {
  if (hp_.n_expert == 0) return 0;
  return total_expert_bytes() / hp_.n_expert * hp_.n_expert_used;
}

ForwardContext::ForwardContext(const Model& model, ExpertProvider& provider, int64_t n_ctx,
                               int max_batch, ThreadPool* pool)
    : model_(model),
      hp_(model.hparams()),
      provider_(provider),
      pool_(pool),
      max_batch_(std::max(1, max_batch)),
      kv_(hp_.n_layer, n_ctx, hp_.k_dim(), hp_.v_dim()),
      moe_(hp_, hp_.n_expert > 0 ? max_batch_ : 1) {
  const size_t B = max_batch_;
  x_.allocate(B * hp_.n_embd * sizeof(float));
  xn_.allocate(B * hp_.n_embd * sizeof(float));
  q_.allocate(B * hp_.q_dim() * sizeof(float));
  k_.allocate(B * hp_.k_dim() * sizeof(float));
  v_.allocate(B * hp_.v_dim() * sizeof(float));
  att_.allocate(B * hp_.attn_out_dim() * sizeof(float));
  tmp_.allocate(B * std::max(hp_.n_embd, std::max(hp_.q_dim(), hp_.k_dim())) * sizeof(float));
  if (hp_.n_ff > 0) {
    gu_.allocate(B * 2 * hp_.n_ff * sizeof(float));
    h_.allocate(B * hp_.n_ff * sizeof(float));
  }
  logits_.allocate(model.n_vocab() * sizeof(float));
  const int nt = pool ? pool->size() : 1;
  scores_.resize(nt);
  for (auto& s : scores_) s.allocate(n_ctx * sizeof(float));
}

void ForwardContext::truncate(int64_t p) {
  if (p < 0 || p > pos_) fail("cannot rewind to position {} (at {})", p, pos_);
  pos_ = p;
}

void ForwardContext::attention(int layer, int n) {
  const int n_head = hp_.n_head, group = hp_.n_head / hp_.n_head_kv;
  const int64_t hd = hp_.head_dim, hdv = hp_.head_dim_v;
  const int64_t qd = hp_.q_dim(), od = hp_.attn_out_dim();
  const int64_t kd = kv_.k_dim(), vd = kv_.v_dim();
  const float scale = 1.0f / std::sqrt((float)hd);
  const float* q = q_.as<float>();
  float* att = att_.as<float>();
  const float* K = kv_.k(layer, 0);
  const float* V = kv_.v(layer, 0);
  const DotF32Fn dot_fn = attn_dot_fn();
  const AxpyF32Fn axpy_fn = attn_axpy_fn();
  auto body = [&](int64_t b, int64_t e, int th) {
    float* s = scores_[th].as<float>();
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = i / n_head, h = i % n_head, g = h / group;
      const int64_t n_pos = pos_ + t + 1;  // causal: this token and everything before it
      const float* qr = q + t * qd + h * hd;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n_pos; ++j) {
        const float* kr = K + j * kd + g * hd;
        s[j] = dot_fn(qr, kr, hd) * scale;
        mx = std::max(mx, s[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n_pos; ++j) {
        s[j] = std::exp(s[j] - mx);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
      float* o = att + t * od + h * hdv;
      std::memset(o, 0, hdv * sizeof(float));
      for (int64_t j = 0; j < n_pos; ++j) {
        axpy_fn(o, V + j * vd + g * hdv, s[j] * inv, hdv);
      }
    }
  };
  if (pool_)
    pool_->parallel_for((int64_t)n * n_head, body);
  else
    body(0, (int64_t)n * n_head, 0);
}

void ForwardContext::forward(std::span<const int32_t> tokens, LogitsMode mode) {
  const int n = (int)tokens.size();
  if (n <= 0) fail("forward: no tokens");
  if (n > max_batch_) fail("forward: {} tokens exceed the batch size {}", n, max_batch_);
  if (pos_ + n > kv_.n_ctx())
    fail("context is full: {} tokens at position {} exceed the context size {} (-c)", n, pos_,
         kv_.n_ctx());
  const ModelWeights& W = model_.weights();
  const int64_t d = hp_.n_embd, qd = hp_.q_dim(), kd = hp_.k_dim(), vd = hp_.v_dim();
  const int64_t hd = hp_.head_dim;
  const int64_t n_vocab = model_.n_vocab();
  for (int t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= n_vocab)
      fail("token id {} is out of range (vocabulary has {} tokens)", tokens[t], n_vocab);

  if (observer_) observer_->on_step_begin(pos_, n);
  provider_.begin_step();

  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  float* tmp = tmp_.as<float>();
  const float eps = hp_.rms_eps;
  const bool neox = hp_.arch->rope == RopeStyle::NeoX;

  const size_t emb_stride = W.token_embd.row_stride();
  for (int t = 0; t < n; ++t)
    dequantize_row(W.token_embd.type, W.token_embd.data + emb_stride * tokens[t], x + t * d, d);

  for (int il = 0; il < hp_.n_layer; ++il) {
    const LayerWeights& L = W.layers[il];
    for (int t = 0; t < n; ++t) rms_norm(x + t * d, L.attn_norm.data(), xn + t * d, d, eps);
    linear(L.wq, xn, n, q, pool_);
    linear(L.wk, xn, n, k, pool_);
    linear(L.wv, xn, n, v, pool_);
    for (int t = 0; t < n; ++t) {
      float* qt = q + t * qd;
      float* kt = k + t * kd;
      if (!L.bq.empty()) {
        add_inplace(qt, L.bq.data(), qd);
        add_inplace(kt, L.bk.data(), kd);
        add_inplace(v + t * vd, L.bv.data(), vd);
      }
      // Norms write to scratch first: the kernel does not promise in-place safety.
      if (hp_.arch->qk_norm == QkNorm::PerHead) {
        for (int h = 0; h < hp_.n_head; ++h) {
          rms_norm(qt + h * hd, L.q_norm.data(), tmp, hd, eps);
          std::memcpy(qt + h * hd, tmp, hd * sizeof(float));
        }
        for (int h = 0; h < hp_.n_head_kv; ++h) {
          rms_norm(kt + h * hd, L.k_norm.data(), tmp, hd, eps);
          std::memcpy(kt + h * hd, tmp, hd * sizeof(float));
        }
      } else if (hp_.arch->qk_norm == QkNorm::Full) {
        rms_norm(qt, L.q_norm.data(), tmp, qd, eps);
        std::memcpy(qt, tmp, qd * sizeof(float));
        rms_norm(kt, L.k_norm.data(), tmp, kd, eps);
        std::memcpy(kt, tmp, kd * sizeof(float));
      }
      const int64_t pos = pos_ + t;
      for (int h = 0; h < hp_.n_head; ++h)
        rope_inplace(qt + h * hd, hd, hp_.n_rot, pos, hp_.rope_base, neox);
      for (int h = 0; h < hp_.n_head_kv; ++h)
        rope_inplace(kt + h * hd, hd, hp_.n_rot, pos, hp_.rope_base, neox);
      std::memcpy(kv_.k(il, pos), kt, kd * sizeof(float));
      std::memcpy(kv_.v(il, pos), v + t * vd, vd * sizeof(float));
    }
    attention(il, n);
    linear(L.wo, att_.as<float>(), n, tmp, pool_);
    add_inplace(x, tmp, (int64_t)n * d);

    for (int t = 0; t < n; ++t) rms_norm(x + t * d, L.ffn_norm.data(), xn + t * d, d, eps);
    if (L.moe) {
      const bool next_moe = il + 1 < hp_.n_layer && W.layers[il + 1].moe;
      moe_.set_stale_input(next_moe ? &W.layers[il + 1] : nullptr, x);
      moe_.run(il, L, xn, n, tokens.data(), pos_, provider_, observer_, tmp, pool_);
    } else {
      swiglu_ffn(view_of(L.ffn_gate, L.ffn_up, L.ffn_down), xn, n, gu_.as<float>(),
                 h_.as<float>(), tmp, pool_);
    }
    add_inplace(x, tmp, (int64_t)n * d);
  }

  if (mode != LogitsMode::None) {
    const int first = mode == LogitsMode::All ? 0 : n - 1;
    const int rows = n - first;
    for (int t = first; t < n; ++t) rms_norm(x + t * d, W.output_norm.data(), xn + t * d, d, eps);
    const size_t need = (size_t)rows * n_vocab * sizeof(float);
    if (logits_.size() < need) logits_.allocate(need);
    linear(W.output, xn + (size_t)first * d, rows, logits_.as<float>(), pool_);
  }
  pos_ += n;
  provider_.end_step();
  if (observer_) observer_->on_step_end();
}

}  // namespace moeflow
