#pragma once
// Records a live run's routing into a Trace through the forward-pass observer seam: per token,
// every MoE layer's experts (rank order) and the weights the block applies, and optionally the
// hidden state entering the MoE block (for training predictors). Chains to another observer so
// it can sit beside the offloading predictors.
#include <cstdint>

#include "model/observer.h"
#include "trace/trace.h"

namespace moeflow::trace {

class TraceRecorder : public ForwardObserver {
 public:
  // hidden_every: keep the hidden state of every k-th token of a request (0 = none, 1 = all).
  TraceRecorder(Trace& out, int hidden_every, ForwardObserver* next = nullptr);

  // Starts a new request (a fresh sequence); steps until the next call belong to it.
  void begin_request(Phase phase);
  // Switches the phase of the current request (prompt done: decode follows).
  void set_phase(Phase phase);

  void on_step_begin(int64_t pos0, int n_tokens) override;
  void on_route(const RouteRecord& r) override;
  void on_step_end() override;

 private:
  Trace& out_;
  int hidden_every_;
  ForwardObserver* next_;
  uint32_t request_ = 0;
  bool started_ = false;
  Phase phase_ = Phase::prefill;
  uint32_t phase_pos_ = 0;    // tokens of the current phase recorded so far
  uint32_t request_pos_ = 0;  // tokens of the current request recorded so far
  size_t step0_ = 0;          // index in out_.steps of the first token of the current step
};

}  // namespace moeflow::trace
