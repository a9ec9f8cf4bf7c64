#pragma once
// ExpertCache: the fast tier. A memory budget (host RAM on CPU-only builds; whatever the
// configured Allocator hands out, e.g. VRAM, on others) cut into preallocated, equally sized,
// 4 KiB-aligned slots (each large enough for the largest expert) and a map from (layer, expert)
// to slot. Which experts hold a place and which one leaves is decided by the cache core shared
// with the simulator (policy/resident_set.h); this class adds what only the live tier has:
// slots and their load states, pins, the route's "wanted" marks, transient slots and the arena.
// Nothing is allocated on the hot path.
//
// Budgets are global (any layer may use any place) or per layer (places split evenly among the
// MoE layers; a layer only evicts its own). A slot is never evicted while it is acquired
// (pins > 0), wanted by the current route, or loading. When the policy may decline misses
// (admit() == false), top-k transient slots are taken out of the budget first: a declined miss
// is read into one and released after use, so it never evicts a resident. The prefill pipeline
// (CacheConfig::stream_slots) streams misses through such slots too.
//
// Not thread-safe: CachedExpertProvider guards it with its own mutex.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "policy/eviction_policy.h"
#include "policy/resident_set.h"

namespace moeflow {

enum class SlotState : uint8_t { Free = 0, Loading = 1, Ready = 2, Failed = 3 };

struct Slot {
  ExpertKey key{-1, -1};
  SlotState state = SlotState::Free;
  int pins = 0;             // outstanding acquire()s
  bool wanted = false;      // routed by the current layer, not yet acquired
  bool prefetched = false;  // loaded speculatively and not yet used
  bool placement = false;   // loaded for the policy's placement: background, never cancelled
  bool transient = false;   // serves one declined miss; holds no place in the budget
};

struct CacheConfig {
  uint64_t budget_bytes = 0;
  uint64_t slot_bytes = 0;
  bool per_layer = false;
  int top_k = 1;
  // Layers with experts (for per-layer budgets and the budget check); n_layers is the model's
  // layer count.
  int n_layers = 0;
  std::vector<int> moe_layers;
  int max_experts = 0;
  // Names the budget in errors ("expert cache" / "low-precision expert cache") and the options
  // that raise it.
  std::string what = "expert cache";
  std::string raise_with = "--expert-cache or --cache-rate";
  // Where the slots live (null: host RAM).
  Allocator* allocator = nullptr;
  // Transient slots for DuoServe's prefill pipeline (at least this many, out of the budget).
  int stream_slots = 0;
};

// A slot bound to an expert, and the expert whose place it took ({-1,-1}: none).
struct Binding {
  int slot = -1;
  ExpertKey evicted{-1, -1};
  bool evicted_unused = false;  // the evicted expert had been prefetched and never used
};

class ExpertCache {
 public:
  // Throws moeflow::Error when the budget cannot hold one layer's top-k experts (plus the
  // transient slots of a policy that declines misses).
  ExpertCache(const CacheConfig& cfg, std::unique_ptr<EvictionPolicy> policy);

  int n_slots() const { return static_cast<int>(slots_.size()); }
  int n_transient() const { return n_transient_; }
  // Places per partition (per layer, or in total for a global budget).
  int capacity() const { return core_->capacity(); }
  uint64_t slot_bytes() const { return cfg_.slot_bytes; }
  uint8_t* slot_data(int s) { return arena_.data() + static_cast<uint64_t>(s) * cfg_.slot_bytes; }
  MemSpace space() const { return arena_.space(); }
  Slot& slot(int s) { return slots_[s]; }
  const Slot& slot(int s) const { return slots_[s]; }
  const EvictionPolicy& policy() const { return *policy_; }
  EvictionPolicy& policy() { return *policy_; }

  // Slot holding (layer, expert) in any state but Free, or -1.
  int find(int layer, int expert) const;

  // What became of a routed expert without a slot (see ResidentSet::route_miss).
  enum class Routed : uint8_t { Loaded, Streamed, Deferred, DeferredStream };
  // At route time. Loaded / Streamed bind a slot in state Loading (Streamed: a transient one);
  // the two Deferred outcomes bind nothing and are retried by serve_miss at acquire.
  Routed route_miss(int layer, int expert, uint64_t t, Binding& b);
  // A routed miss streamed through a transient slot whatever the policy says (the prefill
  // pipeline): Streamed, or DeferredStream when every transient slot is taken.
  Routed route_stream(int layer, int expert, Binding& b);
  // True when every place of `layer`'s partition is taken (a miss would evict).
  bool full(int layer) const { return core_->full(layer); }
  // At acquire, for an expert without a slot: `stream` when the policy declined it. Takes an
  // evictable place (one routed but not yet acquired only as a last resort) or a transient
  // slot. false when none can be had now.
  bool serve_miss(int layer, int expert, uint64_t t, bool stream, Binding& b);
  // A speculative load: only into a free place or one whose expert is evictable now and not
  // `kept`.
  bool bind_speculative(int layer, int expert, uint64_t t, Binding& b, KeyFilter kept);
  bool admits(int layer, int expert, uint64_t t) { return policy_->admit({layer, expert}, t); }

  // The policy's initial residents, bound in state Loading (slots returned).
  std::vector<int> preload();
  // After a prefill (see ResidentSet::place): the placement loads, bound in state Loading.
  std::vector<Binding> place(std::span<const double> counts, uint64_t t);

  // Returns the slot to its free list (cancelled, failed or finished transient load).
  void free_slot(int s);
  // Policy bookkeeping on a use of the slot at logical time t.
  void touch(int s, uint64_t t);
  // True when every slot that could serve `layer` is pinned by acquire() (transient ones for a
  // declined miss, else the layer's partition).
  bool all_pinned(int layer, bool stream) const;

  void set_event_log(std::vector<CacheEvent>* log) { core_->set_log(log); }

 private:
  bool evictable(ExpertKey k, bool allow_wanted) const;
  // Binds `k` to the victim's slot or a free one, state Loading.
  int bind(ExpertKey k, ExpertKey evicted, Binding& b);
  int bind_transient(ExpertKey k);

  CacheConfig cfg_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unique_ptr<ResidentSet> core_;
  Buffer arena_;
  std::vector<Slot> slots_;
  int n_transient_ = 0;
  std::vector<int> free_;              // slots for places
  std::vector<int> free_transient_;    // transient slots
  std::vector<std::vector<int>> map_;  // [layer][expert] -> slot or -1
};

}  // namespace moeflow
