#pragma once
// A recorded routing trace replayed in the live engine (`--routing-trace`): the routers'
// decisions — experts and weights, token by token, layer by layer — come from the trace, while
// everything downstream runs for real (the expert matmuls, the cache, the prefetcher, the reads
// and copies). Models written by gen-model have random routers whose expert use carries no
// temporal locality; a replayed trace puts a real model's locality on the offloading path.
//
// One request of the trace is replayed. Its rows are its prompt (prefill) rows, then its decode
// rows, in recorded order. Which row a position reads depends on what the run is:
//  - a generation (run): the prompt must have exactly as many tokens as the request's prompt
//    rows, so prefill rows go to the prefill and decode rows to the decode steps; a request
//    recorded without prompt rows (decode-only traces) leaves the prompt's routing to the
//    model's router and replays its decode rows from the first generated token on;
//  - decode only (bench's tg, which starts at position 0): the decode rows;
//  - a sequence (bench's pp, perplexity's windows): every row in recorded order from position 0.
// A layer a row does not record (some traces log a subset of layers, some tokens miss a layer)
// keeps the model's own routing for that token and layer; such routes are counted.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/routing_override.h"
#include "trace/trace.h"

namespace moeflow::trace {

// The model's routing shape the trace must have.
struct ReplayShape {
  int n_layer = 0;
  int n_expert = 0;
  int top_k = 0;
};

struct ReplayCounts {
  uint64_t replayed = 0;  // (token, layer) routes taken from the trace
  uint64_t own = 0;       // routes left to the model's router (layer not recorded in the row)
};

class RoutingReplay final : public RoutingOverride {
 public:
  // Request number `request` (0-based, in the order requests first appear) of `t`, which
  // `name` names in messages. Throws moeflow::Error when the trace's shape differs from the
  // model's (layers, experts, top-k), when it has no such request, or when the request has no
  // rows.
  RoutingReplay(const Trace& t, std::string name, ReplayShape model, int request = 0);

  // Where the next sequence (positions from 0) reads its rows; `n_positions` is how many
  // positions it will run, checked against the rows the request has (an Error naming the flag
  // `what` otherwise, before anything runs).
  void begin_generation(int64_t n_prompt, int64_t n_predict);
  void begin_decode(int64_t n_decode, const std::string& what);
  void begin_sequence(int64_t n_positions, const std::string& what);

  void apply(int layer, int64_t pos0, int n, int k, int32_t* experts, float* weights) override;
  // The recorded token ids (-1 where the trace has none) when every position reads a row.
  bool observed_tokens(int64_t pos0, int n, int32_t* ids) override;

  int64_t prompt_rows() const { return n_prompt_rows_; }
  int64_t decode_rows() const { return (int64_t)rows_.size() - n_prompt_rows_; }
  int request() const { return request_; }
  const std::string& name() const { return name_; }
  const std::string& model() const { return model_name_; }
  const ReplayCounts& counts() const { return counts_; }
  // One line for the statistics: the file, the request and its rows, the counts.
  std::string describe() const;

 private:
  // One recorded token: per layer, the trace's route or null.
  struct Row {
    std::vector<const LayerRoute*> by_layer;
    int32_t token_id = -1;
  };
  std::string name_, model_name_;
  ReplayShape shape_;
  int request_ = 0;
  std::vector<TokenStep> steps_;  // the request's steps (owned: rows point into them)
  std::vector<Row> rows_;
  int64_t n_prompt_rows_ = 0;
  // Position p reads row p - first_ (p < own_until_: the model's own routing).
  int64_t first_ = 0, own_until_ = 0;
  ReplayCounts counts_;
};

// The replay as the statistics' JSON names it: {"file", "request", "prompt_rows", "decode_rows",
// "routes_replayed", "routes_own"}.
nlohmann::json replay_json(const RoutingReplay& r);

}  // namespace moeflow::trace
