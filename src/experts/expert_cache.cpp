#include "experts/expert_cache.h"

#include <algorithm>

#include "core/error.h"
#include "experts/expert_store.h"

namespace moeflow {

ExpertCache::ExpertCache(const CacheConfig& cfg, std::unique_ptr<EvictionPolicy> policy)
    : cfg_(cfg), policy_(std::move(policy)) {
  MOEFLOW_CHECK(policy_ != nullptr, "expert cache: no eviction policy given");
  MOEFLOW_CHECK(cfg_.slot_bytes > 0 && !cfg_.moe_layers.empty(),
                "expert cache: the model has no expert tensors to offload");
  MOEFLOW_CHECK(cfg_.top_k >= 1, "expert cache: top-k must be >= 1 (got {})", cfg_.top_k);
  const uint64_t n_total = cfg_.budget_bytes / cfg_.slot_bytes;
  const int n_parts = cfg_.per_layer ? static_cast<int>(cfg_.moe_layers.size()) : 1;
  const uint64_t per_part = n_total / n_parts;
  const uint64_t mib = 1 << 20;
  if (per_part < static_cast<uint64_t>(cfg_.top_k)) {
    fail("{} budget {:.2f} MiB holds {} expert slot(s) of {:.2f} MiB{}, fewer than "
         "one layer's top-k ({}); need at least {:.2f} MiB: raise {}",
         cfg_.what, double(cfg_.budget_bytes) / mib, per_part, double(cfg_.slot_bytes) / mib,
         cfg_.per_layer ? " per layer" : "", cfg_.top_k,
         double(cfg_.slot_bytes) * cfg_.top_k * n_parts / mib, cfg_.raise_with);
  }
  // More slots than experts would never be used.
  uint64_t max_useful = 0;
  for (size_t i = 0; i < cfg_.moe_layers.size(); ++i) max_useful += cfg_.max_experts;
  const uint64_t per_part_cap = cfg_.per_layer ? static_cast<uint64_t>(cfg_.max_experts) : max_useful;
  const uint64_t use_per_part = std::min(per_part, per_part_cap);
  const uint64_t n_slots = use_per_part * n_parts;

  Allocator& alloc = cfg_.allocator ? *cfg_.allocator : HostAllocator::instance();
  arena_ = alloc.allocate(n_slots * cfg_.slot_bytes, kDirectAlign);
  slots_.resize(n_slots);
  free_.resize(n_parts);
  members_.resize(n_parts);
  for (uint64_t s = 0; s < n_slots; ++s) {
    const int part = static_cast<int>(s / use_per_part);
    slots_[s].partition = part;
    members_[part].push_back(static_cast<int>(s));
  }
  for (int p = 0; p < n_parts; ++p) {
    // Lowest slot ids first, so tests and traces are reproducible.
    free_[p].assign(members_[p].rbegin(), members_[p].rend());
  }
  layer_partition_.assign(cfg_.n_layers, -1);
  map_.resize(cfg_.n_layers);
  for (size_t i = 0; i < cfg_.moe_layers.size(); ++i) {
    const int l = cfg_.moe_layers[i];
    MOEFLOW_CHECK(l >= 0 && l < cfg_.n_layers, "expert cache: layer {} out of range", l);
    layer_partition_[l] = cfg_.per_layer ? static_cast<int>(i) : 0;
    map_[l].assign(cfg_.max_experts, -1);
  }
  candidates_.reserve(n_slots);
  candidate_slots_.reserve(n_slots);
}

int ExpertCache::partition_of(int layer) const {
  MOEFLOW_CHECK(layer >= 0 && layer < cfg_.n_layers && layer_partition_[layer] >= 0,
                "expert cache: layer {} has no experts", layer);
  return layer_partition_[layer];
}

int ExpertCache::find(int layer, int expert) const {
  if (layer < 0 || layer >= cfg_.n_layers) return -1;
  const auto& m = map_[layer];
  if (expert < 0 || static_cast<size_t>(expert) >= m.size()) return -1;
  return m[expert];
}

int ExpertCache::allocate(int layer, int expert, bool steal_wanted, ExpertKey& evicted,
                          bool& evicted_unused) {
  const int part = partition_of(layer);
  MOEFLOW_CHECK(expert >= 0 && static_cast<size_t>(expert) < map_[layer].size(),
                "expert cache: no expert {} in layer {}", expert, layer);
  evicted = {-1, -1};
  evicted_unused = false;
  int s = -1;
  if (!free_[part].empty()) {
    s = free_[part].back();
    free_[part].pop_back();
  } else {
    for (int pass = 0; pass < 2 && s < 0; ++pass) {
      if (pass == 1 && !steal_wanted) break;
      candidates_.clear();
      candidate_slots_.clear();
      for (int c : members_[part]) {
        const Slot& sl = slots_[c];
        if (sl.pins > 0 || sl.state == SlotState::Loading) continue;
        if (sl.wanted && pass == 0) continue;
        candidates_.push_back(sl.key);
        candidate_slots_.push_back(c);
      }
      if (candidates_.empty()) continue;
      const ExpertKey victim = policy_->choose_victim(candidates_, clock_);
      for (size_t i = 0; i < candidates_.size(); ++i) {
        if (candidates_[i] == victim) s = candidate_slots_[i];
      }
      MOEFLOW_CHECK(s >= 0, "eviction policy '{}' chose expert {} of layer {}, not a candidate",
                    policy_->name(), victim.expert, victim.layer);
    }
    if (s < 0) return -1;
    Slot& v = slots_[s];
    evicted = v.key;
    evicted_unused = v.prefetched;
    map_[v.key.layer][v.key.expert] = -1;
    policy_->on_evict(v.key);
  }
  Slot& sl = slots_[s];
  sl.key = {layer, expert};
  sl.state = SlotState::Loading;
  sl.pins = 0;
  sl.wanted = false;
  sl.prefetched = false;
  map_[layer][expert] = s;
  policy_->on_insert(sl.key, ++clock_);
  return s;
}

void ExpertCache::free_slot(int s) {
  Slot& sl = slots_[s];
  if (sl.state == SlotState::Free) return;
  map_[sl.key.layer][sl.key.expert] = -1;
  policy_->on_evict(sl.key);
  sl = Slot{{-1, -1}, SlotState::Free, 0, false, false, sl.partition};
  free_[sl.partition].push_back(s);
}

void ExpertCache::touch(int s) { policy_->on_access(slots_[s].key, ++clock_); }

bool ExpertCache::all_pinned(int layer) const {
  for (int c : members_[partition_of(layer)]) {
    if (slots_[c].pins == 0) return false;
  }
  return true;
}

}  // namespace moeflow
