#pragma once
// Routing decided elsewhere: a hook that replaces the router's choice of each MoE layer after
// the router ran (its logits and probabilities stay the model's own). Everything downstream —
// the planner, the provider and its cache, the expert matmuls, the combine — runs on the
// replaced choice. Uses: comparing two backends' numerics with their routing held equal (a
// routing flip between a GPU and the CPU changes every later position), and replaying a
// recorded routing trace.
#include <cstdint>

namespace moeflow {

class RoutingOverride {
 public:
  virtual ~RoutingOverride() = default;
  // The step's n tokens at positions pos0.. in `layer`: experts and weights, n x k each in
  // router rank order, to overwrite in place. Throws moeflow::Error when it has no routing for
  // them (a trace shorter than the run, another model's shape).
  virtual void apply(int layer, int64_t pos0, int n, int k, int32_t* experts, float* weights) = 0;
  // The token ids that observers of the routing (predictors, recorders) see for those tokens,
  // written to `ids`; false keeps the run's own. A replay gives the ids recorded with the routing
  // (-1 where the trace has none), so a predictor that learns token -> experts learns the
  // recorded pairs, as the simulator does on the same trace.
  virtual bool observed_tokens(int64_t /*pos0*/, int /*n*/, int32_t* /*ids*/) { return false; }
};

}  // namespace moeflow
