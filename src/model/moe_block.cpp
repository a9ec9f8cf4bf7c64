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
  const int units = 2 * hp.n_expert;
  logits_.resize((size_t)max_tokens * hp.n_expert);
  probs_.resize((size_t)max_tokens * hp.n_expert);
  cached_.resize(hp.n_expert);
  experts_.resize((size_t)max_tokens * k_);
  weights_.resize((size_t)max_tokens * k_);
  uses_.resize((size_t)max_tokens * k_, ExpertUse::High);
  slots_of_.resize(units);
  for (auto& s : slots_of_) s.reserve(max_tokens);
  seen_.resize(units);
  union_.reserve(units);
  union_experts_.reserve(units);
  union_prec_.reserve(units);
  order_.reserve(units);
  order_prec_.reserve(units);
  for (auto& r : rank_) r.reserve(units);
  xe_.allocate((size_t)max_tokens * d * sizeof(float));
  gu_.allocate((size_t)max_tokens * 2 * ff * sizeof(float));
  h_.allocate((size_t)max_tokens * ff * sizeof(float));
  ye_.allocate((size_t)max_tokens * d * sizeof(float));
  yslot_.allocate((size_t)max_tokens * k_ * d * sizeof(float));
  shgate_.resize(max_tokens);
  pre_experts_.reserve(k_);
  pre_served_.resize(units);
  pre_logits_.resize(hp.n_expert);
  pre_probs_.resize(hp.n_expert);
  pre_w_.resize(k_);
  pre_pick_.resize(k_);
  stale_.allocate((size_t)d * sizeof(float));
  pre_out_.allocate((size_t)k_ * d * sizeof(float));
}

void MoeBlock::run_expert(ExpertProvider& provider, int layer, int e, Precision p,
                          const float* x, int m, float* y, ThreadPool* pool) {
  const int64_t d = hp_.n_embd;
  ExpertView v = provider.acquire(layer, e, p);
  try {
    if (v.cols[0] != d || v.rows[2] != d)
      fail("layer {} expert {}: provider returned a slice of shape {}x{}, expected n_embd {}",
           layer, e, v.rows[2], v.cols[0], d);
    swiglu_ffn(v, x, m, gu_.as<float>(), h_.as<float>(), y, pool);
  } catch (...) {
    provider.release(layer, e, p);
    throw;
  }
  provider.release(layer, e, p);
}

void MoeBlock::precalculate(int layer, ExpertProvider& provider, ThreadPool* pool) {
  const LayerWeights& N = *next_;
  const int64_t d = hp_.n_embd;
  const int next = layer + 1;
  float* stale = stale_.as<float>();
  rms_norm(resid_, N.ffn_norm.data(), stale, d, hp_.rms_eps);
  linear(N.gate_inp, stale, 1, pre_logits_.data(), pool);
  select_topk(pre_logits_.data(), hp_.n_expert, k_, hp_.norm_topk, pre_pick_.data(), pre_w_.data(),
              pre_probs_.data());
  pre_experts_.clear();
  for (int e : pre_pick_) {
    // Only what costs no read: waiting for a copy here would delay this layer's own experts.
    if (provider.residency(next, e) != Residency::Resident) continue;
    run_expert(provider, next, e, Precision::High, stale, 1,
               pre_out_.as<float>() + pre_experts_.size() * (size_t)d, pool);
    pre_experts_.push_back(e);
  }
  pre_layer_ = next;
  if (usage_ && !pre_experts_.empty()) {
    PrecisionUsage::Counts c;
    c.precalc_computed = pre_experts_.size();
    usage_->add(next, c);
  }
}

void MoeBlock::set_mode(const PrecisionModeConfig& mode, std::shared_ptr<PrecisionUsage> usage) {
  validate(mode);
  mode_ = mode;
  usage_ = std::move(usage);
}

// What the cache holds is asked once per expert and step, before the provider hears of the
// routing: the decision must see the cache as the previous steps and the predictors left it.
void MoeBlock::revise_for_cache(int layer, int n, ExpertProvider& provider,
                                PrecisionUsage::Counts& counts) {
  const int E = hp_.n_expert, k = k_;
  // HOBBIT: a high copy already on its way costs no further bytes, so it counts as cached.
  // DAOP replaces what would stall the token: only a resident expert is a substitute, and an
  // expert still loading is as much a miss as one not started.
  const bool in_flight_counts = mode_.mode == ExpertMode::Hobbit;
  for (int e = 0; e < E; ++e) {
    const Residency r = provider.residency(layer, e);
    cached_[e] = r == Residency::Resident || (in_flight_counts && r == Residency::InFlight);
  }
  if (mode_.mode == ExpertMode::Hobbit) {
    // HOBBIT changes only misses: a cached high-precision copy is used whatever the score.
    for (int i = 0; i < n * k; ++i)
      if (uses_[i] != ExpertUse::High && cached_[experts_[i]]) uses_[i] = ExpertUse::High;
    return;
  }
  // DAOP's graceful degradation is a decode-time rule (prefill loads each expert once for
  // many tokens, so a substitution would cost accuracy for little I/O).
  if (mode_.mode != ExpertMode::Daop || n != 1) return;
  for (int t = 0; t < n; ++t) {
    int* ex = experts_.data() + t * k;
    const float* p = probs_.data() + (size_t)t * E;
    bool kept_miss = false, changed = false;
    for (int r = 0; r < k; ++r) {
      if (cached_[ex[r]]) continue;
      if (!kept_miss) {  // the highest-ranked miss is loaded as routed
        kept_miss = true;
        continue;
      }
      int best = -1;
      for (int c = 0; c < E; ++c) {
        if (!cached_[c] || std::find(ex, ex + k, c) != ex + k) continue;
        if (best < 0 || p[c] > p[best]) best = c;
      }
      if (best < 0) continue;  // nothing cached to fall back on: load it after all
      ex[r] = best;
      changed = true;
      ++counts.substituted;
    }
    if (!changed) continue;
    float* w = weights_.data() + t * k;
    float s = 0;
    for (int r = 0; r < k; ++r) s += w[r] = p[ex[r]];
    if (hp_.norm_topk && s > 0)
      for (int r = 0; r < k; ++r) w[r] /= s;
  }
}

void MoeBlock::run(int layer, const LayerWeights& L, const float* xn, int n, const int32_t* tokens,
                   int64_t pos0, ExpertProvider& provider, ForwardObserver* observer, float* out,
                   ThreadPool* pool) {
  if (n <= 0 || n > max_tokens_) fail("MoE block: {} tokens exceed the batch size {}", n, max_tokens_);
  const int E = hp_.n_expert, k = k_;
  const int64_t d = hp_.n_embd;
  const bool mixed = mode_.needs_low();
  if (mixed && !provider.has_low_precision())
    fail("--mode {} needs low-precision copies of the experts, and this model has none: "
         "pack it with `moeflow pack -m IN.gguf -o OUT.gguf --low Q4_0` (or another type)",
         expert_mode_name(mode_.mode));
  last_n_ = n;
  // Outputs pre-calculated by the previous layer's run() for this one (decode steps only).
  const bool take_pre = mode_.precalc && n == 1 && pre_layer_ == layer;
  pre_layer_ = -1;

  // 1. route
  linear(L.gate_inp, xn, n, logits_.data(), pool);
  for (int t = 0; t < n; ++t) {
    select_topk(logits_.data() + (size_t)t * E, E, k, hp_.norm_topk, experts_.data() + t * k,
                weights_.data() + t * k, probs_.data() + (size_t)t * E);
    decide_uses(mode_, weights_.data() + t * k, k, uses_.data() + t * k);
  }
  PrecisionUsage::Counts counts;
  if (mode_.cache_aware()) revise_for_cache(layer, n, provider, counts);

  // Union of the (expert, precision) units in rank order (all tokens' first choices, then
  // second ...); skipped choices are not part of it.
  union_.clear();
  union_experts_.clear();
  union_prec_.clear();
  std::fill(seen_.begin(), seen_.end(), 0);
  for (auto& s : slots_of_) s.clear();
  for (int r = 0; r < k; ++r)
    for (int t = 0; t < n; ++t) {
      const ExpertUse use = uses_[t * k + r];
      if (use == ExpertUse::Skip) {
        ++counts.skip;
        continue;
      }
      (use == ExpertUse::Low ? counts.low : counts.high) += 1;
      const Precision p = use == ExpertUse::Low ? Precision::Low : Precision::High;
      const int u = experts_[t * k + r] * 2 + (int)p;
      if (!seen_[u]) {
        seen_[u] = 1;
        union_.push_back(u);
        union_experts_.push_back(u / 2);
        union_prec_.push_back(p);
      }
    }
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < k; ++r) {
      const ExpertUse use = uses_[t * k + r];
      if (use == ExpertUse::Skip) continue;
      slots_of_[experts_[t * k + r] * 2 + (use == ExpertUse::Low ? 1 : 0)].push_back(t * k + r);
    }
  // Stale-input pre-calculation: a high-precision unit computed ahead takes that output now
  // (pre_out_ is reused by this step's own pre-calculation) and is neither announced to the
  // provider nor acquired.
  std::fill(pre_served_.begin(), pre_served_.end(), 0);
  if (take_pre) {
    float* yslot = yslot_.as<float>();
    for (size_t j = 0; j < pre_experts_.size(); ++j) {
      const int u = pre_experts_[j] * 2 + (int)Precision::High;
      if (!seen_[u]) continue;
      pre_served_[u] = 1;
      for (int slot : slots_of_[u])
        std::memcpy(yslot + (size_t)slot * d, pre_out_.as<float>() + j * (size_t)d, d * sizeof(float));
      counts.precalc += slots_of_[u].size();
    }
    union_experts_.clear();
    union_prec_.clear();
    for (int u : union_)
      if (!pre_served_[u]) {
        union_experts_.push_back(u / 2);
        union_prec_.push_back((Precision)(u % 2));
      }
  }
  if (usage_) usage_->add(layer, counts);

  // 2. exact experts to the provider first, then the observer (its predictions are LOW).
  if (mixed) {
    provider.on_route_mixed(layer, union_experts_, union_prec_);
  } else {
    provider.on_route(layer, union_experts_);
  }
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
  // Residency is asked once per unit: a live cache may change its answer between calls,
  // which would break the sort's ordering contract.
  order_.clear();
  order_prec_.clear();
  for (int cls = 0; cls < 3; ++cls) rank_[cls].clear();
  for (int u : union_) {
    if (pre_served_[u]) continue;
    const Precision p = (Precision)(u % 2);
    const Residency res =
        mixed ? provider.residency_mixed(layer, u / 2, p) : provider.residency(layer, u / 2);
    rank_[std::clamp((int)res, 0, 2)].push_back(u);
  }
  for (int cls = 0; cls < 3; ++cls)
    for (int u : rank_[cls]) {
      order_.push_back(u / 2);
      order_prec_.push_back((Precision)(u % 2));
    }

  // 4. unit by unit, batched over the tokens routed to it.
  float* xe = xe_.as<float>();
  float* ye = ye_.as<float>();
  float* yslot = yslot_.as<float>();
  // Pre-calculation for the next layer runs once, just before the first wait for a read that
  // is already under way (a read not yet started would only be delayed by it).
  bool may_precalc = mode_.precalc && n == 1 && next_ && next_->moe && resid_;
  for (size_t i = 0; i < order_.size(); ++i) {
    const int e = order_[i];
    const Precision p = order_prec_[i];
    if (may_precalc && i >= rank_[0].size()) {
      may_precalc = false;
      const Residency res = mixed ? provider.residency_mixed(layer, e, p) : provider.residency(layer, e);
      if (res == Residency::InFlight) precalculate(layer, provider, pool);
    }
    const auto& slots = slots_of_[e * 2 + (int)p];
    const int m = (int)slots.size();
    for (int j = 0; j < m; ++j)
      std::memcpy(xe + (size_t)j * d, xn + (size_t)(slots[j] / k) * d, d * sizeof(float));
    run_expert(provider, layer, e, p, xe, m, ye, pool);
    for (int j = 0; j < m; ++j)
      std::memcpy(yslot + (size_t)slots[j] * d, ye + (size_t)j * d, d * sizeof(float));
  }

  // 5. combine in fixed order: token ascending, router rank ascending. Skipped experts add
  // nothing, and the kept weights are not renormalised (docs/lossy-modes.md).
  for (int t = 0; t < n; ++t) {
    float* o = out + (size_t)t * d;
    std::memset(o, 0, d * sizeof(float));
    for (int r = 0; r < k; ++r) {
      if (uses_[t * k + r] == ExpertUse::Skip) continue;
      scale_add_inplace(o, yslot + (size_t)(t * k + r) * d, weights_[t * k + r], d);
    }
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
