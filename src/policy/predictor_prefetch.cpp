#include "policy/predictor_prefetch.h"

#include <algorithm>

#include "core/error.h"

namespace moeflow {

PredictorPrefetch::PredictorPrefetch(ExpertProvider& provider, std::unique_ptr<Predictor> predictor,
                                     int n_layers, int max_tokens)
    : provider_(provider),
      predictor_(std::move(predictor)),
      n_layers_(n_layers),
      max_tokens_(max_tokens) {
  MOEFLOW_CHECK(predictor_ != nullptr, "predictor prefetch: no predictor");
  MOEFLOW_CHECK(n_layers_ > 0 && max_tokens_ > 0, "predictor prefetch: {} layers, max_tokens {}",
                n_layers_, max_tokens_);
}

void PredictorPrefetch::on_step_begin(int64_t pos0, int n_tokens) {
  // Position 0 starts a new sequence (the engine was reset): per-sequence state starts over.
  if (pos0 == 0) predictor_->on_sequence_start();
  step_tokens_ = n_tokens;
  if (next_) next_->on_step_begin(pos0, n_tokens);
}

void PredictorPrefetch::on_step_end() {
  step0_ += (uint64_t)std::max(0, step_tokens_);
  step_tokens_ = 0;
  if (next_) next_->on_step_end();
}

void PredictorPrefetch::on_route(const RouteRecord& r) {
  if (next_) next_->on_route(r);
  if (r.n_tokens <= 0 || r.top_k <= 0) return;
  merged_.clear();
  const int first_queued = std::max(0, r.n_tokens - max_tokens_);
  const int first_shown = predictor_->learns_from_every_token() ? 0 : first_queued;
  for (int t = first_shown; t < r.n_tokens; ++t) {
    const size_t k = (size_t)r.top_k, off = (size_t)t * k;
    PredictorInput in;
    in.route = RouteEvent{
        r.layer, step0_ + (uint64_t)t, r.prefill, r.experts.subspan(off, k),
        r.weights.size() >= off + k ? r.weights.subspan(off, k) : std::span<const float>{}};
    if (r.n_embd > 0 && r.hidden.size() >= (size_t)(t + 1) * r.n_embd)
      in.hidden = r.hidden.subspan((size_t)t * r.n_embd, (size_t)r.n_embd);
    in.token_id = (size_t)t < r.tokens.size() ? r.tokens[t] : -1;
    preds_.clear();
    predictor_->on_layer(in, preds_);
    if (t < first_queued) continue;
    for (const Prediction& p : preds_) {
      if (p.layer < 0 || p.layer >= n_layers_ || p.expert < 0) continue;
      auto same = std::find_if(merged_.begin(), merged_.end(), [&](const Prediction& m) {
        return m.layer == p.layer && m.expert == p.expert && m.precision == p.precision;
      });
      if (same == merged_.end())
        merged_.push_back(p);
      else
        same->confidence = std::max(same->confidence, p.confidence);
    }
  }
  // Most confident first, so that the prefetcher's LOW queue starts with the likeliest loads.
  std::stable_sort(merged_.begin(), merged_.end(), [](const Prediction& a, const Prediction& b) {
    return a.confidence > b.confidence;
  });
  for (const Prediction& p : merged_)
    provider_.expect(p.layer, std::span<const int>(&p.expert, 1), p.precision);
  for (const Prediction& p : merged_) {
    // HOBBIT serves a cached or coming high copy whatever the score: no low copy needed then.
    if (mode_.mode == ExpertMode::Hobbit && p.precision == Precision::Low &&
        provider_.residency(p.layer, p.expert) != Residency::NotStarted)
      continue;
    provider_.prefetch(p.layer, std::span<const int>(&p.expert, 1),
                       std::clamp(p.confidence, 0.f, 1.f), p.precision);
  }
  predictions_ += merged_.size();
}

}  // namespace moeflow
