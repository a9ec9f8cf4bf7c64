#pragma once
// Hook on the forward pass: called after each MoE layer has routed, before its experts run.
// Predictors (gate lookahead) and trace recorders plug in here; Model::router_logits lets them
// apply any layer's router to a hidden state.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace moeflow {

// Lets lookahead predictors apply a later layer's router to a hidden state: returns that
// layer's router logits (n_experts). Provided by the live model; the simulator provides it only
// for traces that carry hidden states and router weights.
using RouterFn =
    std::function<void(int layer, std::span<const float> hidden, std::vector<float>& logits)>;

struct RouteRecord {
  int layer = 0;
  int n_tokens = 0;
  int top_k = 0;
  int64_t n_embd = 0;
  int64_t pos0 = 0;                 // position of the first token of this step
  bool prefill = false;             // more than one token in the step
  std::span<const float> hidden;    // n_tokens x n_embd: ffn_norm output entering the MoE block
  std::span<const int> experts;     // n_tokens x top_k, router rank order
  std::span<const float> weights;   // n_tokens x top_k, the weights the block will apply
  std::span<const int32_t> tokens;  // n_tokens token ids of the step
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_step_begin(int64_t pos0, int n_tokens) {}
  virtual void on_route(const RouteRecord& r) = 0;
  virtual void on_step_end() {}
};

}  // namespace moeflow
