#include "model/moe_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/linear.h"

namespace moeflow {

void select_topk(const float* logits, int n_expert, int k, bool renorm, int* experts,
                 float* weights, float* p) {
  float mx = logits[0];
  for (int e = 1; e < n_expert; ++e) mx = std::max(mx, logits[e]);
  double sum = 0;
  for (int e = 0; e < n_expert; ++e) {
    p[e] = std::exp(logits[e] - mx);
    sum += p[e];
  }
  const float inv = (float)(1.0 / sum);
  for (int e = 0; e < n_expert; ++e) p[e] *= inv;
  // k is small (<= 8 in practice): repeated selection keeps the tie rule obvious.
  for (int r = 0; r < k; ++r) {
    int best = -1;
    for (int e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int j = 0; j < r; ++j) taken |= experts[j] == e;
      if (taken) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    experts[r] = best;
    weights[r] = p[best];
  }
  if (renorm) {
    float s = 0;
    for (int r = 0; r < k; ++r) s += weights[r];
    if (s > 0)
      for (int r = 0; r < k; ++r) weights[r] /= s;
  }
}

MoeBlock::MoeBlock(const HParams& hp, int max_tokens)
    : hp_(hp), max_tokens_(max_tokens), k_(hp.n_expert_used) {
  const int64_t d = hp.n_embd;
  const int64_t ff = std::max(hp.n_ff_exp, hp.n_ff_shexp);
  logits_.resize((size_t)max_tokens * hp.n_expert);
  probs_scratch_.resize(hp.n_expert);
  experts_.resize((size_t)max_tokens * k_);
  weights_.resize((size_t)max_tokens * k_);
  slots_of_.resize(hp.n_expert);
  for (auto& s : slots_of_) s.reserve(max_tokens);
  seen_.resize(hp.n_expert);
  union_.reserve(hp.n_expert);
  order_.reserve(hp.n_expert);
  for (auto& r : rank_) r.reserve(hp.n_expert);
  xe_.allocate((size_t)max_tokens * d * sizeof(float));
  gu_.allocate((size_t)max_tokens * 2 * ff * sizeof(float));
  h_.allocate((size_t)max_tokens * ff * sizeof(float));
  ye_.allocate((size_t)max_tokens * d * sizeof(float));
  yslot_.allocate((size_t)max_tokens * k_ * d * sizeof(float));
  shgate_.resize(max_tokens);
}

void MoeBlock::run(int layer, const LayerWeights& L, const float* xn, int n, const int32_t* tokens,
                   int64_t pos0, ExpertProvider& provider, ForwardObserver* observer, float* out,
                   ThreadPool* pool) {
  if (n <= 0 || n > max_tokens_) fail("MoE block: {} tokens exceed the batch size {}", n, max_tokens_);
  const int E = hp_.n_expert, k = k_;
  const int64_t d = hp_.n_embd;
  last_n_ = n;

  // 1. route
  linear(L.gate_inp, xn, n, logits_.data(), pool);
  for (int t = 0; t < n; ++t)
    select_topk(logits_.data() + (size_t)t * E, E, k, hp_.norm_topk, experts_.data() + t * k,
                weights_.data() + t * k, probs_scratch_.data());

  // Union of the chosen experts in rank order (all tokens' first choices, then second ...).
  union_.clear();
  std::fill(seen_.begin(), seen_.end(), 0);
  for (auto& s : slots_of_) s.clear();
  for (int r = 0; r < k; ++r)
    for (int t = 0; t < n; ++t) {
      const int e = experts_[t * k + r];
      if (!seen_[e]) {
        seen_[e] = 1;
        union_.push_back(e);
      }
    }
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < k; ++r) slots_of_[experts_[t * k + r]].push_back(t * k + r);

  // 2. exact experts to the provider first, then the observer (its predictions are LOW).
  provider.on_route(layer, union_);
  if (observer) {
    RouteRecord rec;
    rec.layer = layer;
    rec.n_tokens = n;
    rec.top_k = k;
    rec.n_embd = d;
    rec.pos0 = pos0;
    rec.prefill = n > 1;
    rec.hidden = {xn, (size_t)n * d};
    rec.experts = {experts_.data(), (size_t)n * k};
    rec.weights = {weights_.data(), (size_t)n * k};
    if (tokens) rec.tokens = {tokens, (size_t)n};
    observer->on_route(rec);
  }

  // 3. reorder: resident, then in flight, then not started (stable within a class).
  // Residency is asked once per expert: a live cache may change its answer between calls,
  // which would break the sort's ordering contract.
  order_.clear();
  for (int cls = 0; cls < 3; ++cls) rank_[cls].clear();
  for (int e : union_) {
    const int cls = std::clamp((int)provider.residency(layer, e), 0, 2);
    rank_[cls].push_back(e);
  }
  for (int cls = 0; cls < 3; ++cls) order_.insert(order_.end(), rank_[cls].begin(), rank_[cls].end());

  // 4. expert by expert, batched over the tokens routed to it.
  float* xe = xe_.as<float>();
  float* ye = ye_.as<float>();
  float* yslot = yslot_.as<float>();
  for (int e : order_) {
    const auto& slots = slots_of_[e];
    const int m = (int)slots.size();
    for (int i = 0; i < m; ++i)
      std::memcpy(xe + (size_t)i * d, xn + (size_t)(slots[i] / k) * d, d * sizeof(float));
    ExpertView v = provider.acquire(layer, e, Precision::High);
    try {
      if (v.cols[0] != d || v.rows[2] != d)
        fail("layer {} expert {}: provider returned a slice of shape {}x{}, expected n_embd {}",
             layer, e, v.rows[2], v.cols[0], d);
      swiglu_ffn(v, xe, m, gu_.as<float>(), h_.as<float>(), ye, pool);
    } catch (...) {
      provider.release(layer, e, Precision::High);
      throw;
    }
    provider.release(layer, e, Precision::High);
    stats_.expert_calls++;
    for (int p = 0; p < kNumExpertProj; ++p)
      if (v.data[p]) stats_.expert_bytes += row_bytes(v.type[p], v.cols[p]) * (uint64_t)v.rows[p];
    for (int i = 0; i < m; ++i)
      std::memcpy(yslot + (size_t)slots[i] * d, ye + (size_t)i * d, d * sizeof(float));
  }

  // 5. combine in fixed order: token ascending, router rank ascending.
  for (int t = 0; t < n; ++t) {
    float* o = out + (size_t)t * d;
    std::memset(o, 0, d * sizeof(float));
    for (int r = 0; r < k; ++r)
      scale_add_inplace(o, yslot + (size_t)(t * k + r) * d, weights_[t * k + r], d);
  }

  // Shared expert (qwen2moe): always on, scaled by sigmoid(gate_inp_shexp . x).
  if (L.gate_shexp) {
    ExpertView sv = view_of(L.gate_shexp, L.up_shexp, L.down_shexp);
    swiglu_ffn(sv, xn, n, gu_.as<float>(), h_.as<float>(), ye, pool);
    linear(L.gate_inp_shexp, xn, n, shgate_.data(), pool);
    for (int t = 0; t < n; ++t) {
      const float g = 1.0f / (1.0f + std::exp(-shgate_[t]));
      scale_add_inplace(out + (size_t)t * d, ye + (size_t)t * d, g, d);
    }
  }
}

}  // namespace moeflow
