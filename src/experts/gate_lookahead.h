#pragma once
// The simplest predictor, wired live: when layer l routes, apply the router of the next MoE
// layer(s) to layer l's hidden state and prefetch their top-k experts at LOW priority, with
// the router probability as confidence (in the precision the lossy mode will want). Plugs into the forward pass as a ForwardObserver and
// chains to another observer (trace recorder) if one is set.
#include <memory>
#include <vector>

#include "model/moe/expert_provider.h"
#include "model/moe/precision_mode.h"
#include "model/observer.h"
#include "policy/predictor.h"

namespace moeflow {

struct LookaheadConfig {
  int n_layers = 0;
  std::vector<int> n_experts;  // per layer; 0 for dense layers
  int top_k = 1;
  int distance = 1;       // how many MoE layers ahead to predict
  int max_tokens = 8;     // prefill steps: predict from the last max_tokens tokens only
  // Past the last MoE layer, predict the next token's first MoE layers from the last hidden
  // state (a rougher guess, but it overlaps the logits/sampling time with I/O).
  bool wrap = true;
  // Lossy modes: predicted experts are prefetched in the precision the mode will ask for
  // (HOBBIT's rule applied to the predicted weights); ones it would skip are not prefetched.
  PrecisionModeConfig mode;
};

class GateLookahead final : public ForwardObserver {
 public:
  GateLookahead(ExpertProvider& provider, RouterFn router, LookaheadConfig cfg);
  void set_next(ForwardObserver* next) { next_ = next; }

  void on_step_begin(int64_t pos0, int n_tokens) override;
  void on_route(const RouteRecord& r) override;
  void on_step_end() override;

  uint64_t predictions() const { return predictions_; }

 private:
  ExpertProvider& provider_;
  RouterFn router_;
  LookaheadConfig cfg_;
  ForwardObserver* next_ = nullptr;
  std::vector<float> logits_, probs_;
  std::vector<int> order_, chosen_;
  std::vector<Precision> chosen_prec_;
  std::vector<float> conf_, topw_;
  std::vector<ExpertUse> uses_;
  uint64_t predictions_ = 0;
};

}  // namespace moeflow
