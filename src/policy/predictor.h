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

#include "model/moe/expert_provider.h"  // Precision
#include "model/moe/precision_mode.h"
#include "model/observer.h"  // RouterFn
#include "policy/eviction_policy.h"

namespace moeflow {

struct Prediction {
  int layer = 0;
  int expert = 0;
  float confidence = 0;  // 0..1, used for priority among LOW tasks
  // The copy to prefetch: a lossy mode may want an expert's low-precision copy (lookahead).
  Precision precision = Precision::High;
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
  // Whether the predictor learns from every token it is shown (history predictors) or only
  // reads the token it predicts from (router lookahead): a prompt's early tokens are then not
  // shown at all, as their predictions would not be queued (policy/predictor_prefetch.h).
  virtual bool learns_from_every_token() const { return true; }
};

struct PredictorOptions {
  int n_layers = 0;
  int n_experts = 0;
  int top_k = 0;
  int lookahead = 1;       // layers ahead
  int hidden_dim = 0;      // width of the hidden state the predictor sees (0 = unknown)
  std::string model_path;  // trained predictor weights, if any
  // Experts of each layer (0: a dense layer) where that differs by layer; empty: n_experts in
  // every layer. The lookahead predictor counts MoE layers only.
  std::vector<int> layer_experts;
  // The lossy mode the engine runs (lookahead: predicted experts are asked for in the precision
  // the mode will want, and ones it would skip are not predicted).
  PrecisionModeConfig mode;
};

std::unique_ptr<Predictor> make_predictor(const std::string& name, const PredictorOptions& opt);
std::vector<std::string> predictor_names();
// Whether the predictor guesses from hidden states (rather than from routing history alone): its
// guesses then follow the model's own routers, not a routing replayed from a trace.
bool predictor_reads_hidden_states(const std::string& name);

}  // namespace moeflow
