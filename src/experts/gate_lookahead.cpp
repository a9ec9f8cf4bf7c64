#include "experts/gate_lookahead.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moeflow {

GateLookahead::GateLookahead(ExpertProvider& provider, RouterFn router, LookaheadConfig cfg)
    : provider_(provider), router_(std::move(router)), cfg_(std::move(cfg)) {
  MOEFLOW_CHECK(router_ != nullptr, "gate lookahead: the model provides no router function");
  MOEFLOW_CHECK(cfg_.distance >= 1, "--lookahead must be >= 1 (got {})", cfg_.distance);
}

void GateLookahead::on_step_begin(int64_t pos0, int n_tokens) {
  if (next_) next_->on_step_begin(pos0, n_tokens);
}

void GateLookahead::on_step_end() {
  if (next_) next_->on_step_end();
}

void GateLookahead::on_route(const RouteRecord& r) {
  if (next_) next_->on_route(r);
  if (r.n_tokens <= 0 || r.n_embd <= 0) return;
  int target = r.layer;
  bool wrapped = false;
  for (int d = 0; d < cfg_.distance; ++d) {
    for (;;) {
      ++target;
      if (target >= cfg_.n_layers) {
        if (!cfg_.wrap || wrapped) return;
        wrapped = true;
        target = 0;
      }
      if (cfg_.n_experts[target] > 0) break;
    }
    if (wrapped && target >= r.layer) return;
    const int n_exp = cfg_.n_experts[target];
    const int k = std::min(cfg_.top_k, n_exp);
    chosen_.clear();
    chosen_prec_.clear();
    conf_.clear();
    const int t0 = std::max(0, r.n_tokens - cfg_.max_tokens);
    for (int t = t0; t < r.n_tokens; ++t) {
      router_(target, r.hidden.subspan(static_cast<size_t>(t) * r.n_embd, r.n_embd), logits_);
      if (static_cast<int>(logits_.size()) < n_exp) return;
      const float mx = *std::max_element(logits_.begin(), logits_.begin() + n_exp);
      probs_.resize(n_exp);
      double sum = 0;
      for (int e = 0; e < n_exp; ++e) sum += probs_[e] = std::exp(logits_[e] - mx);
      order_.resize(n_exp);
      for (int e = 0; e < n_exp; ++e) order_[e] = e;
      std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                        [&](int a, int b) { return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b); });
      topw_.resize(k);
      uses_.resize(k);
      for (int i = 0; i < k; ++i) topw_[i] = static_cast<float>(probs_[order_[i]] / sum);
      decide_uses(cfg_.mode, topw_.data(), k, uses_.data());
      for (int i = 0; i < k; ++i) {
        if (uses_[i] == ExpertUse::Skip) continue;
        const int e = order_[i];
        const Precision p = uses_[i] == ExpertUse::Low ? Precision::Low : Precision::High;
        bool dup = false;
        for (size_t j = 0; j < chosen_.size(); ++j) dup |= chosen_[j] == e && chosen_prec_[j] == p;
        if (dup) continue;
        chosen_.push_back(e);
        chosen_prec_.push_back(p);
        conf_.push_back(topw_[i]);
      }
    }
    // One call per confidence so the prefetcher can order LOW tasks by it; farther layers are
    // discounted, they are needed later.
    const float discount = 1.0f / static_cast<float>(d + 1);
    for (size_t i = 0; i < chosen_.size(); ++i) {
      const std::span<const int> one(&chosen_[i], 1);
      // HOBBIT serves a cached high copy whatever the score: no low copy needed then. (Only
      // the modes that use low copies decide Low: the others prefetch in High.)
      if (cfg_.mode.mode == ExpertMode::Hobbit && chosen_prec_[i] == Precision::Low &&
          provider_.residency(target, chosen_[i]) != Residency::NotStarted)
        continue;
      provider_.prefetch(target, one, conf_[i] * discount, chosen_prec_[i]);
    }
    predictions_ += chosen_.size();
  }
}

}  // namespace moeflow
