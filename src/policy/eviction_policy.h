#pragma once
// Cache replacement behind one small interface, shared by the live ExpertCache (experts/) and
// the trace-driven simulator (trace/) through one cache core (policy/resident_set.h). A policy
// only ranks; the core and its caller decide which experts are candidates (resident, not in
// transit or pinned, not routed by the layer, same layer for per-layer budgets).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace moeflow {

struct ExpertKey {
  int layer = 0;
  int expert = 0;
  bool operator==(const ExpertKey&) const = default;
};

// One router decision, as seen by policies and predictors.
struct RouteEvent {
  int layer = 0;
  uint64_t step = 0;  // global token step (decode token or prefill token index)
  bool prefill = false;
  std::span<const int> experts;    // chosen experts, rank order
  std::span<const float> weights;  // their gate weights (same length), may be empty
  // Precision each expert was used in (0 high, 1 low; HOBBIT mode of the live cache), same
  // length as experts, or empty when unknown (traces, the simulator).
  std::span<const uint8_t> precisions = {};
};

// Every hook is called by the one cache core (policy/resident_set.h) or next to it, in the same
// order live (experts/cached_provider) and in the simulator (trace/simulator); the comments say
// when. Times are logical: logical_time(first token of the step, layer).
class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string name() const = 0;

  // A use of k at logical time t: live when the expert is acquired, in the simulator after the
  // layer's route was decided (deferred misses after their insertion). Declined (streamed)
  // misses are uses too.
  virtual void on_access(ExpertKey k, uint64_t t) = 0;
  // k took a place in the cache at time t (a routed miss, a prefetch, a placement load; time 0
  // for the initial residents).
  virtual void on_insert(ExpertKey k, uint64_t t) = 0;
  virtual void on_evict(ExpertKey k) = 0;
  // Among non-empty `candidates` (ascending (layer, expert)), the one to evict now.
  virtual ExpertKey choose_victim(std::span<const ExpertKey> candidates, uint64_t t) = 0;

  // Every routed layer of every step, before its misses look for room: the union of the
  // step's experts in router rank order; gate weights when the step has one token; the
  // precision of each use only where the cache holds two precisions (live HOBBIT mode).
  virtual void on_route(const RouteEvent& ev) {}
  // A new sequence starts (live: a forward pass at position 0; simulator: a new request).
  virtual void on_sequence_start() {}

  // Added for placement-style policies (static, DAOP). admit() == false means "serve this miss
  // without caching it" (stream it / compute it elsewhere) instead of evicting a resident.
  // Asked once per routed miss, at route time.
  virtual bool admit(ExpertKey k, uint64_t t) { return true; }
  // False when admit() may decline: the live cache then keeps top-k transient slots out of
  // the budget, through which declined misses are read and released after use.
  virtual bool admits_everything() const { return true; }
  // Experts to load before the first token (capacity given per layer, or in total when the
  // cache has one global budget: then `layer` is -1). Empty = start cold. Live they are read
  // in the background when the provider starts; the simulator starts with them in place.
  virtual std::vector<ExpertKey> initial_residents(int layer, int capacity) { return {}; }
  // Called when a prefill (all prompt tokens of one sequence) has routed, with per-layer
  // expert counts (n_layers * n_experts, row-major; one count per token routed to the expert).
  // DAOP swaps placement here. Live: before the sequence's first single-token step.
  virtual void on_prefill_done(std::span<const double> counts) {}
  // Experts the policy wants loaded now (placement swaps), taken right after
  // on_prefill_done; the cache/sim fetches them (live: in the background).
  virtual std::vector<ExpertKey> take_placement_requests() { return {}; }
};

struct PolicyOptions {
  int n_layers = 0;
  int n_experts = 0;
  int top_k = 0;
  // Calibration: per-layer expert selection counts (n_layers * n_experts, row-major) from a
  // calibration trace. Needed by "static" and "daop"; others ignore it.
  std::vector<double> calib_counts;
  // Cache capacity in experts per layer (per-layer budgets) or in total (global budget); used
  // by placement policies to decide what to pin. 0 = unknown.
  int capacity_per_layer = 0;
  int capacity_total = 0;
  // HOBBIT score weights {lru, lfu, lhu, fld}; empty = defaults (fitted ones come from the
  // simulator's calibration, see trace/calibrate.h).
  std::vector<double> weights;
};

// Factory by name ("lru", "lfu", ...); throws moeflow::Error listing the known names.
std::unique_ptr<EvictionPolicy> make_eviction_policy(const std::string& name,
                                                     const PolicyOptions& opt);
std::vector<std::string> eviction_policy_names();
// True for the policies that place experts by a calibration (PolicyOptions::calib_counts).
bool eviction_policy_needs_calibration(const std::string& name);

}  // namespace moeflow
