#pragma once
// Trace-driven simulator of an expert cache with prefetching (docs/simulator.md).
// Replays a routing trace through an EvictionPolicy and a Predictor on a modelled timeline:
// one shared link moves experts (demand loads first, speculative prefetches queued behind),
// a prefetched expert is a hit only if it arrived before its use, otherwise the layer stalls
// for the rest of the transfer.
#include <string>
#include <vector>

#include "policy/resident_set.h"
#include "trace/hw_profile.h"
#include "trace/oracle.h"
#include "trace/trace.h"

namespace moeflow::trace {

struct SimConfig {
  std::string policy = "lru";      // eviction policy name, or "belady" (future-aware)
  std::string predictor = "none";  // predictor name, "none", or "oracle" (future-aware)
  double cache_rate = 0.5;         // share of each layer's experts that fit (per-layer budget)
  bool global_budget = false;      // one budget for all layers instead of per layer
  HwProfile hw;
  const Trace* calibration =
      nullptr;  // for static/daop/hobbit/predictor warm-up; null = the trace itself
  std::vector<double> hobbit_weights;  // empty = fit on the calibration trace
  // Cap on prefetches issued after one layer routes; 0: none (the live engine has none).
  int max_prefetch_per_call = 8;
  int oracle_lookahead = 32;    // layers ahead the oracle predictor sees
  OracleQuality oracle;         // and how good it is (default: perfect)
  std::string predictor_model;  // trained predictor weights (promoe)
  bool skip_late_prefetches =
      true;  // do not start a prefetch whose target runs before it can arrive
  // When set, every insertion into and eviction from the cache, in order (tests that compare
  // the simulator with the live cache, which logs the same events).
  std::vector<CacheEvent>* events = nullptr;
};

struct LayerStats {
  int layer = 0;
  uint64_t uses = 0, hits = 0, late = 0;  // late: prefetched but still in flight
  uint64_t predicted = 0, correct = 0;    // predictor output vs actual routing
  double stall_ms = 0;
};

struct SimResult {
  std::string policy, predictor;
  double cache_rate = 0;
  int capacity = 0;  // experts per layer (or total, global budget)
  uint64_t uses = 0, hits = 0, late = 0;
  double hit_rate = 0;
  double bytes_moved = 0;
  uint64_t demand_loads = 0, prefetches = 0, prefetch_used = 0, prefetch_in_time = 0;
  // Of demand_loads: the experts a placement policy (DAOP) asked for after a prefill. They are
  // no routed miss, yet cost a read each.
  uint64_t placement_loads = 0;
  double prefetch_accuracy = 0;  // prefetches used before eviction / prefetches issued
  double in_time_rate = 0;       // used prefetches that arrived before their use
  double goodpred = 0;           // accuracy x in-time rate
  double pred_precision = 0, pred_recall = 0;  // of the predictor's raw output
  double stall_ms = 0;                         // total critical-path stall
  double tpot_ms = 0;                          // mean decode step time
  double ttft_ms = 0;                          // mean prefill time per request (0 without prefill)
  uint64_t decode_tokens = 0;
  std::vector<LayerStats> layers;
};

SimResult simulate(const Trace& t, const SimConfig& cfg);

// Per-layer expert counts (n_layers * n_experts) of a trace: the calibration of static/DAOP.
std::vector<double> routing_counts(const Trace& t);

// Grid search of HOBBIT's four weights on `calib` (demand-only hit rate, same cache rate).
std::vector<double> fit_hobbit_weights(const Trace& calib, const SimConfig& base);

std::vector<std::string> sim_policy_names();     // every policy incl. "belady"
std::vector<std::string> sim_predictor_names();  // every predictor usable on `t` incl. "none"
std::vector<std::string> sim_predictor_names(const Trace& t);

}  // namespace moeflow::trace
