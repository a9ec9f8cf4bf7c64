#include "model/moe/moe_planner.h"

#include <algorithm>

#include "core/error.h"

namespace moeflow {

MoePlanner::MoePlanner(const HParams& hp, int max_tokens)
    : hp_(hp), max_tokens_(max_tokens), k_(hp.n_expert_used) {
  const int units = 2 * hp.n_expert;
  probs_.resize((size_t)max_tokens * hp.n_expert);
  cached_.resize(hp.n_expert);
  experts_.resize((size_t)max_tokens * k_);
  weights_.resize((size_t)max_tokens * k_);
  keep_.resize((size_t)max_tokens * k_);
  uses_.resize((size_t)max_tokens * k_, ExpertUse::High);
  slots_of_.resize(units);
  for (auto& s : slots_of_) s.reserve(max_tokens);
  seen_.resize(units);
  union_.reserve(units);
  union_experts_.reserve(units);
  union_prec_.reserve(units);
  order_.reserve(units);
  order_prec_.reserve(units);
  units_.reserve(units);
  for (auto& r : rank_) r.reserve(units);
  pre_experts_.reserve(k_);
  pre_served_.resize(units);
}

void MoePlanner::set_mode(const PrecisionModeConfig& mode, std::shared_ptr<PrecisionUsage> usage) {
  validate(mode);
  mode_ = mode;
  usage_ = std::move(usage);
}

// What the cache holds is asked once per expert and step, before the provider hears of the
// routing: the decision must see the cache as the previous steps and the predictors left it.
void MoePlanner::revise_for_cache(int layer, int n, ExpertProvider& provider,
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
    int32_t* ex = experts_.data() + t * k;
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

void MoePlanner::plan(int layer, int n, const int32_t* tokens, int64_t pos0,
                      std::span<const float> hidden, ExpertProvider& provider,
                      ForwardObserver* observer) {
  if (n <= 0 || n > max_tokens_)
    fail("MoE block: {} tokens exceed the batch size {}", n, max_tokens_);
  const int k = k_;
  last_n_ = n;
  // Outputs pre-calculated by the previous layer for this one (decode steps only).
  const bool take_pre = mode_.precalc && n == 1 && pre_layer_ == layer;
  pre_layer_ = -1;

  // 0. decide
  for (int t = 0; t < n; ++t) decide_uses(mode_, weights_.data() + t * k, k, uses_.data() + t * k);
  PrecisionUsage::Counts counts;
  if (mode_.cache_aware()) revise_for_cache(layer, n, provider, counts);
  for (int i = 0; i < n * k; ++i) keep_[i] = uses_[i] != ExpertUse::Skip;

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
  // and is neither announced to the provider nor acquired.
  std::fill(pre_served_.begin(), pre_served_.end(), 0);
  served_.clear();
  if (take_pre) {
    for (size_t j = 0; j < pre_experts_.size(); ++j) {
      const int u = pre_experts_[j] * 2 + (int)Precision::High;
      if (!seen_[u]) continue;
      pre_served_[u] = 1;
      for (int32_t slot : slots_of_[u]) served_.push_back({slot, (int)j});
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

  // 1. exact experts to the provider first, then the observer (its predictions are LOW).
  provider.on_tokens_routed(layer, n, k, {experts_.data(), (size_t)n * k},
                            {weights_.data(), (size_t)n * k});
  provider.on_route(layer, union_experts_, union_prec_);
  if (observer) {
    RouteRecord rec;
    rec.layer = layer;
    rec.n_tokens = n;
    rec.top_k = k;
    rec.n_embd = hp_.n_embd;
    rec.pos0 = pos0;
    rec.prefill = n > 1;
    rec.hidden = hidden;
    rec.experts = {experts_.data(), (size_t)n * k};
    rec.weights = {weights_.data(), (size_t)n * k};
    if (tokens) rec.tokens = {tokens, (size_t)n};
    observer->on_route(rec);
  }

  // 2. reorder: resident, then in flight, then not started (stable within a class).
  // Residency is asked once per unit: a live cache may change its answer between calls,
  // which would break the sort's ordering contract.
  order_.clear();
  order_prec_.clear();
  units_.clear();
  for (int cls = 0; cls < 3; ++cls) rank_[cls].clear();
  for (int u : union_) {
    if (pre_served_[u]) continue;
    const Precision p = (Precision)(u % 2);
    const Residency res = provider.residency(layer, u / 2, p);
    rank_[std::clamp((int)res, 0, 2)].push_back(u);
  }
  for (int cls = 0; cls < 3; ++cls)
    for (int u : rank_[cls]) {
      order_.push_back(u / 2);
      order_prec_.push_back((Precision)(u % 2));
      units_.push_back({u / 2, (Precision)(u % 2), slots_of_[u]});
    }
  n_resident_ = rank_[0].size();
}

bool MoePlanner::precalc_before(size_t index, int layer, ExpertProvider& provider) const {
  if (index < n_resident_ || index >= units_.size()) return false;
  const MoeUnit& u = units_[index];
  return provider.residency(layer, u.expert, u.precision) == Residency::InFlight;
}

void MoePlanner::record_precalc(int next, std::span<const int> computed) {
  pre_experts_.assign(computed.begin(), computed.end());
  pre_layer_ = next;
  if (usage_ && !pre_experts_.empty()) {
    PrecisionUsage::Counts c;
    c.precalc_computed = pre_experts_.size();
    usage_->add(next, c);
  }
}

}  // namespace moeflow
