#pragma once
// Every predictor of policy/ (the default router lookahead, gate, stacked gate, ProMoE's MLP,
// token id, DuoServe, EAMC) driven by the live forward pass: the one prefetch path of the
// engine. A ForwardObserver that feeds every routed layer to the predictor, as the simulator
// does when it replays a trace, and queues the predictions as LOW-priority prefetches on the
// expert provider, in the precision each asks for. A prediction for a layer at or before the
// current one targets the next token. Chains to another observer (trace recorder) if one is set.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/moe/expert_provider.h"
#include "model/moe/precision_mode.h"
#include "model/observer.h"
#include "policy/predictor.h"

namespace moeflow {

class PredictorPrefetch final : public ForwardObserver {
 public:
  // max_tokens: in a prefill step every token trains the predictor, but only the last
  // max_tokens tokens' predictions are queued (the prompt's early tokens say little about the
  // next step, and hundreds of them would flood the LOW queue).
  PredictorPrefetch(ExpertProvider& provider, std::unique_ptr<Predictor> predictor, int n_layers,
                    int max_tokens = 8);
  void set_next(ForwardObserver* next) { next_ = next; }
  void set_router(RouterFn fn) { predictor_->set_router(std::move(fn)); }
  // The engine's lossy mode: under HOBBIT a cached (or coming) high copy serves a low-precision
  // use, so a predicted low copy of such an expert is not fetched.
  void set_mode(const PrecisionModeConfig& m) { mode_ = m; }

  void on_step_begin(int64_t pos0, int n_tokens) override;
  void on_route(const RouteRecord& r) override;
  void on_step_end() override;

  // Distinct (layer, expert, precision) prefetches queued so far.
  uint64_t predictions() const { return predictions_; }
  const Predictor& predictor() const { return *predictor_; }

 private:
  ExpertProvider& provider_;
  std::unique_ptr<Predictor> predictor_;
  int n_layers_;
  int max_tokens_;
  ForwardObserver* next_ = nullptr;
  PrecisionModeConfig mode_;
  uint64_t step0_ = 0;  // global token index of the current step's first token
  int step_tokens_ = 0;
  std::vector<Prediction> preds_, merged_;
  uint64_t predictions_ = 0;
};

}  // namespace moeflow
