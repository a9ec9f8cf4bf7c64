#pragma once
// ExpertCache: the fast tier. A memory budget (host RAM on CPU-only builds; whatever the
// configured Allocator hands out, e.g. VRAM, on others) cut into preallocated,
// equally sized, 4 KiB-aligned slots (each large enough for the largest expert), a map from
// (layer, expert) to slot, and eviction through an EvictionPolicy. Nothing is allocated on the
// hot path: a miss takes a free slot or evicts a victim.
//
// Budgets are global (any layer may use any slot) or per layer (slots split evenly among the
// MoE layers; a layer only evicts its own). A slot is never evicted while it is acquired
// (pins > 0), wanted by the current route, or loading.
//
// Not thread-safe: CachedExpertProvider guards it with its own mutex.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "policy/eviction_policy.h"

namespace moeflow {

enum class SlotState : uint8_t { Free = 0, Loading = 1, Ready = 2, Failed = 3 };

struct Slot {
  ExpertKey key{-1, -1};
  SlotState state = SlotState::Free;
  int pins = 0;             // outstanding acquire()s
  bool wanted = false;      // chosen by the router this step, not yet acquired
  bool prefetched = false;  // loaded speculatively and not yet used
  int partition = 0;
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
};

class ExpertCache {
 public:
  // Throws moeflow::Error when the budget cannot hold one layer's top-k experts.
  ExpertCache(const CacheConfig& cfg, std::unique_ptr<EvictionPolicy> policy);

  int n_slots() const { return static_cast<int>(slots_.size()); }
  uint64_t slot_bytes() const { return cfg_.slot_bytes; }
  uint8_t* slot_data(int s) { return arena_.data() + static_cast<uint64_t>(s) * cfg_.slot_bytes; }
  MemSpace space() const { return arena_.space(); }
  Slot& slot(int s) { return slots_[s]; }
  const Slot& slot(int s) const { return slots_[s]; }
  const EvictionPolicy& policy() const { return *policy_; }
  EvictionPolicy& policy() { return *policy_; }

  // Slot holding (layer, expert) in any state but Free, or -1.
  int find(int layer, int expert) const;

  // Takes a free slot of the layer's partition or evicts a victim, binds it to the key in
  // state Loading. Returns -1 when every slot is busy (pinned, wanted or loading), unless
  // `steal_wanted`, in which case a wanted-but-unacquired slot may be taken as a last resort.
  // `evicted` receives the victim's key ({-1,-1} if the slot was free) and whether it had
  // been prefetched but never used.
  int allocate(int layer, int expert, bool steal_wanted, ExpertKey& evicted, bool& evicted_unused);
  // Returns the slot to the free list (cancelled or failed load).
  void free_slot(int s);

  // Policy bookkeeping on a use of the slot.
  void touch(int s);
  // True when every slot of the layer's partition is pinned by acquire().
  bool all_pinned(int layer) const;
  int partition_of(int layer) const;
  uint64_t now() const { return clock_; }

 private:
  CacheConfig cfg_;
  std::unique_ptr<EvictionPolicy> policy_;
  Buffer arena_;
  std::vector<Slot> slots_;
  std::vector<std::vector<int>> free_;         // per partition
  std::vector<std::vector<int>> members_;      // slot ids per partition
  std::vector<int> layer_partition_;           // layer -> partition (-1: no experts)
  std::vector<std::vector<int>> map_;          // [layer][expert] -> slot or -1
  std::vector<ExpertKey> candidates_;          // scratch, reserved up front
  std::vector<int> candidate_slots_;
  uint64_t clock_ = 0;
};

}  // namespace moeflow
