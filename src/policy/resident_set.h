#pragma once
// The one cache core behind the live expert cache (experts/expert_cache) and the trace
// simulator (trace/simulator): how many experts each partition of the budget holds (one global
// partition, or one per MoE layer), which experts hold a place, and which one leaves when a new
// one needs room. The EvictionPolicy picks among the candidates the caller allows, offered in
// (layer, expert) order so that ties break the same way on both sides. What is not shared stays
// with the callers: the live cache adds slots, pins, load states and the memory arena; the
// simulator adds a modelled timeline.
//
// The rules both callers follow (docs/ARCHITECTURE.md, "One cache core"):
//  - every time handed to the policy is logical_time(first token of the step, layer);
//  - a routed miss is first offered to admit(); a declined miss is served without a place
//    (streamed) and evicts nothing;
//  - an admitted miss makes room at route time among the residents that are neither in transit
//    nor routed by the layer (route_miss); with none it is deferred until the layer's other
//    experts have been served, and then the served ones are candidates too (serve_deferred);
//  - the policy's placement (initial_residents, then on_prefill_done / take_placement_requests
//    after a prefill) goes through preload() and place().
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "policy/eviction_policy.h"

namespace moeflow {

// What every cache passes to its policy as "now": layers of one step share their step's
// token, so a prefill of n tokens is one step and the next step starts n tokens later.
inline uint64_t logical_time(uint64_t first_token, int layer, int n_layers) {
  return first_token * static_cast<uint64_t>(n_layers) + static_cast<uint64_t>(layer);
}

// One change of the resident set, for tests that compare two caches event by event.
struct CacheEvent {
  enum Kind : uint8_t { Insert = 0, Evict = 1 } kind = Insert;
  ExpertKey key;
  uint64_t t = 0;  // logical time of an insertion (0 for evictions)
  bool operator==(const CacheEvent&) const = default;
};

// A borrowed predicate over keys (no allocation on the miss path, unlike std::function). It
// refers to the callable it was made from: pass lambdas as arguments, never keep one.
class KeyFilter {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, KeyFilter>>>
  KeyFilter(F&& f)  // NOLINT: implicit, so that callers pass lambdas directly
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, ExpertKey k) {
          return static_cast<bool>((*static_cast<std::remove_reference_t<F>*>(o))(k));
        }) {}
  bool operator()(ExpertKey k) const { return call_(obj_, k); }

 private:
  void* obj_;
  bool (*call_)(void*, ExpertKey);
};

class ResidentSet {
 public:
  struct Config {
    int n_layers = 0;         // layer ids are < n_layers
    int n_experts = 0;        // experts of the widest layer
    std::vector<int> layers;  // layers that have experts
    bool per_layer = false;   // one partition per layer in `layers`, else one for all
    int capacity = 0;         // places per partition
  };
  enum class Miss : uint8_t { Load, Stream, Defer };

  // The policy outlives the set.
  ResidentSet(const Config& c, EvictionPolicy& policy);

  EvictionPolicy& policy() const { return *policy_; }
  int capacity() const { return cfg_.capacity; }
  int n_partitions() const { return static_cast<int>(members_.size()); }
  const Config& config() const { return cfg_; }
  bool valid(ExpertKey k) const;  // a layer with experts and an expert id inside it
  bool contains(ExpertKey k) const { return valid(k) && in_[index(k)] != 0; }
  // Places taken in the partition of `layer`, and whether it has none left.
  int size(int layer) const;
  bool full(int layer) const { return size(layer) >= cfg_.capacity; }
  // Whether some resident of layer's partition satisfies `f`.
  bool any_resident(int layer, KeyFilter f) const;

  // The policy's victim among the residents of layer's partition that `allow` accepts, or
  // {-1, -1} when it accepts none. Evicts nothing.
  ExpertKey pick_victim(int layer, uint64_t t, KeyFilter allow);
  // Room for one more expert of `layer`: true at once when the partition has a free place,
  // else after evicting the policy's victim among the allowed (written to `evicted`).
  bool make_room(int layer, uint64_t t, KeyFilter allow, ExpertKey& evicted);
  void insert(ExpertKey k, uint64_t t);  // takes a place; the policy hears on_insert
  void evict(ExpertKey k);               // gives it back; the policy hears on_evict
  void access(ExpertKey k, uint64_t t) { policy_->on_access(k, t); }

  // A routed expert that holds no place, at route time: Stream when the policy declines it,
  // Load when it got a place (after evicting `evicted`, if set), Defer when every resident is
  // protected (in transit or routed by this layer; `allow` says which are not).
  Miss route_miss(ExpertKey k, uint64_t t, KeyFilter allow, ExpertKey& evicted);
  // A deferred miss once the layer's other experts were served: `allow` now admits those.
  // false when there is still no candidate.
  bool serve_deferred(ExpertKey k, uint64_t t, KeyFilter allow, ExpertKey& evicted);

  // The policy's initial residents (per partition, or all at once for a global budget), valid
  // and within capacity, inserted at time 0 and returned for the caller to load.
  std::vector<ExpertKey> preload();
  // After a prefill: on_prefill_done(counts), then each placement request that is absent and
  // finds room among `allow` is inserted at `t`; returned as (key, evicted) for loading.
  std::vector<std::pair<ExpertKey, ExpertKey>> place(std::span<const double> counts, uint64_t t,
                                                     KeyFilter allow);

  // Every insertion and eviction is appended to `log` (null: none).
  void set_log(std::vector<CacheEvent>* log) { log_ = log; }

 private:
  size_t index(ExpertKey k) const {
    return static_cast<size_t>(k.layer) * cfg_.n_experts + k.expert;
  }
  int part(int layer) const { return layer >= 0 && layer < cfg_.n_layers ? part_[layer] : -1; }

  Config cfg_;
  EvictionPolicy* policy_;
  std::vector<int> part_;                       // layer -> partition (-1: no experts)
  std::vector<uint8_t> in_;                     // [layer * n_experts + expert]
  std::vector<std::vector<uint32_t>> members_;  // per partition, ascending index()
  std::vector<ExpertKey> cand_;                 // scratch
  std::vector<CacheEvent>* log_ = nullptr;
};

}  // namespace moeflow
