#include "trace/recorder.h"

#include "core/error.h"

namespace moeflow::trace {

TraceRecorder::TraceRecorder(Trace& out, int hidden_every, ForwardObserver* next)
    : out_(out), hidden_every_(hidden_every), next_(next) {
  if (hidden_every < 0) fail("hidden-state sampling interval must be >= 0, got {}", hidden_every);
}

void TraceRecorder::begin_request(Phase phase) {
  if (started_) ++request_;
  started_ = true;
  phase_ = phase;
  phase_pos_ = 0;
  request_pos_ = 0;
}

void TraceRecorder::set_phase(Phase phase) {
  if (phase != phase_) phase_pos_ = 0;
  phase_ = phase;
}

void TraceRecorder::on_step_begin(int64_t pos0, int n_tokens) {
  if (!started_) begin_request(Phase::prefill);
  step0_ = out_.steps.size();
  for (int t = 0; t < n_tokens; ++t) {
    TokenStep s;
    s.request = request_;
    s.phase = phase_;
    s.pos = phase_pos_ + (uint32_t)t;
    out_.steps.push_back(std::move(s));
  }
  if (next_) next_->on_step_begin(pos0, n_tokens);
}

void TraceRecorder::on_route(const RouteRecord& r) {
  MOEFLOW_CHECK(step0_ + (size_t)r.n_tokens <= out_.steps.size(),
                "trace recorder: layer {} routed {} tokens outside a step", r.layer, r.n_tokens);
  for (int t = 0; t < r.n_tokens; ++t) {
    TokenStep& s = out_.steps[step0_ + t];
    if (!r.tokens.empty()) s.token_id = r.tokens[t];
    LayerRoute lr;
    lr.layer = r.layer;
    lr.experts.assign(r.experts.begin() + (size_t)t * r.top_k,
                      r.experts.begin() + (size_t)(t + 1) * r.top_k);
    lr.weights.assign(r.weights.begin() + (size_t)t * r.top_k,
                      r.weights.begin() + (size_t)(t + 1) * r.top_k);
    if (hidden_every_ > 0 && (request_pos_ + (uint32_t)t) % (uint32_t)hidden_every_ == 0)
      lr.hidden.assign(r.hidden.begin() + (size_t)t * r.n_embd,
                       r.hidden.begin() + (size_t)(t + 1) * r.n_embd);
    s.routes.push_back(std::move(lr));
  }
  if (next_) next_->on_route(r);
}

void TraceRecorder::on_step_end() {
  const uint32_t n = (uint32_t)(out_.steps.size() - step0_);
  phase_pos_ += n;
  request_pos_ += n;
  if (next_) next_->on_step_end();
}

}  // namespace moeflow::trace
