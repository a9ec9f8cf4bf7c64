#pragma once
// Expert predictors: from what has been seen so far in this step (routing of earlier layers,
// optionally hidden states), guess which experts later layers / the next token will use, so
// the prefetcher can load them at LOW priority. Shared by the live engine and the simulator.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/observer.h"  // RouterFn
#include "policy/eviction_policy.h"

namespace moeflow {

struct Prediction {
  int layer = 0;
  int expert = 0;
  float confidence = 0;  // 0..1, used for priority among LOW tasks
};

// What a predictor may read when a layer has routed.
struct PredictorInput {
  RouteEvent route;
  // Hidden state entering this layer's MoE block (normalised), if available (live engine or a
  // trace recorded with hidden states); empty otherwise.
  std::span<const float> hidden;
  int token_id = -1;  // current token id, if known
};


class Predictor {
 public:
  virtual ~Predictor() = default;
  virtual std::string name() const = 0;
  // Called after each layer routes; appends predictions for later layers (or the next token).
  virtual void on_layer(const PredictorInput& in, std::vector<Prediction>& out) = 0;
  virtual void on_sequence_start() {}
  virtual void set_router(RouterFn fn) {}
};

struct PredictorOptions {
  int n_layers = 0;
  int n_experts = 0;
  int top_k = 0;
  int lookahead = 1;            // layers ahead
  int hidden_dim = 0;           // width of the hidden state the predictor sees (0 = unknown)
  std::string model_path;       // trained predictor weights, if any
};

std::unique_ptr<Predictor> make_predictor(const std::string& name, const PredictorOptions& opt);
std::vector<std::string> predictor_names();

}  // namespace moeflow
