#include "experts/expert_cache.h"

#include <algorithm>

#include "backend/device_rules.h"
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
  // A policy that declines misses streams them through slots of their own, so that serving
  // one never costs a resident its place.
  n_transient_ = std::max(policy_->admits_everything() ? 0 : cfg_.top_k, cfg_.stream_slots);
  const uint64_t per_part =
      n_total > static_cast<uint64_t>(n_transient_) ? (n_total - n_transient_) / n_parts : 0;
  const uint64_t mib = 1 << 20;
  if (per_part < static_cast<uint64_t>(cfg_.top_k)) {
    const std::string streams =
        !n_transient_ ? ""
        : cfg_.stream_slots == n_transient_
            ? fmt::format(" after {} slot(s) for the prefill pipeline", n_transient_)
            : fmt::format(" after {} transient slot(s) for the misses policy '{}' streams",
                          n_transient_, policy_->name());
    fail(
        "{} budget {:.2f} MiB holds {} expert slot(s) of {:.2f} MiB{}{}, fewer than "
        "one layer's top-k ({}); need at least {:.2f} MiB: raise {}",
        cfg_.what, double(cfg_.budget_bytes) / mib, per_part, double(cfg_.slot_bytes) / mib,
        cfg_.per_layer ? " per layer" : "", streams, cfg_.top_k,
        double(cfg_.slot_bytes) * (cfg_.top_k * n_parts + n_transient_) / mib, cfg_.raise_with);
  }
  // More places than experts would never be used.
  const uint64_t per_part_cap =
      static_cast<uint64_t>(cfg_.max_experts) * (cfg_.per_layer ? 1 : cfg_.moe_layers.size());
  const int capacity = static_cast<int>(std::min(per_part, per_part_cap));
  const uint64_t n_places = static_cast<uint64_t>(capacity) * n_parts;
  const uint64_t n_slots = n_places + n_transient_;

  ResidentSet::Config rc;
  rc.n_layers = cfg_.n_layers;
  rc.n_experts = cfg_.max_experts;
  rc.layers = cfg_.moe_layers;
  rc.per_layer = cfg_.per_layer;
  rc.capacity = capacity;
  core_ = std::make_unique<ResidentSet>(rc, *policy_);

  Allocator& alloc = cfg_.allocator ? *cfg_.allocator : HostAllocator::instance();
  // Host slots take O_DIRECT reads straight from the file (4 KiB alignment); device slots are
  // filled through staging and device memory comes 256-byte aligned at most
  // (backend/device_rules.h: a GPU's allocator refuses more).
  const size_t align = alloc.space() == MemSpace::Device ? kDeviceMaxAlignment : kDirectAlign;
  arena_ = alloc.allocate(n_slots * cfg_.slot_bytes, align);
  slots_.resize(n_slots);
  // Lowest slot ids first, so tests and traces are reproducible.
  for (uint64_t s = n_places; s-- > 0;) free_.push_back(static_cast<int>(s));
  for (uint64_t s = n_slots; s-- > n_places;) {
    slots_[s].transient = true;
    free_transient_.push_back(static_cast<int>(s));
  }
  map_.resize(cfg_.n_layers);
  for (int l : cfg_.moe_layers) {
    MOEFLOW_CHECK(l >= 0 && l < cfg_.n_layers, "expert cache: layer {} out of range", l);
    map_[l].assign(cfg_.max_experts, -1);
  }
}

int ExpertCache::find(int layer, int expert) const {
  if (layer < 0 || layer >= cfg_.n_layers) return -1;
  const auto& m = map_[layer];
  if (expert < 0 || static_cast<size_t>(expert) >= m.size()) return -1;
  return m[expert];
}

bool ExpertCache::evictable(ExpertKey k, bool allow_wanted) const {
  const int s = find(k.layer, k.expert);
  if (s < 0) return false;
  const Slot& sl = slots_[s];
  return sl.state == SlotState::Ready && sl.pins == 0 && (allow_wanted || !sl.wanted);
}

int ExpertCache::bind(ExpertKey k, ExpertKey evicted, Binding& b) {
  int s = -1;
  b.evicted = evicted;
  b.evicted_unused = false;
  if (evicted.layer >= 0) {
    s = map_[evicted.layer][evicted.expert];
    b.evicted_unused = slots_[s].prefetched;
    map_[evicted.layer][evicted.expert] = -1;
  } else {
    // The core counts places; every place it grants has a free slot behind it.
    MOEFLOW_CHECK(!free_.empty(), "expert cache: no free slot for a granted place");
    s = free_.back();
    free_.pop_back();
  }
  slots_[s] = Slot{k, SlotState::Loading, 0, false, false, false, false};
  map_[k.layer][k.expert] = s;
  b.slot = s;
  return s;
}

int ExpertCache::bind_transient(ExpertKey k) {
  MOEFLOW_CHECK(
      n_transient_ > 0,
      "eviction policy '{}' declined a miss but says it admits everything (admits_everything())",
      policy_->name());
  if (free_transient_.empty()) return -1;
  const int s = free_transient_.back();
  free_transient_.pop_back();
  slots_[s] = Slot{k, SlotState::Loading, 0, false, false, false, true};
  map_[k.layer][k.expert] = s;
  return s;
}

ExpertCache::Routed ExpertCache::route_miss(int layer, int expert, uint64_t t, Binding& b) {
  MOEFLOW_CHECK(find(layer, expert) < 0 && core_->valid({layer, expert}),
                "expert cache: expert {} of layer {} cannot be routed as a miss", expert, layer);
  b = Binding{};
  ExpertKey ev;
  const ExpertKey k{layer, expert};
  switch (core_->route_miss(
      k, t, [&](ExpertKey c) { return evictable(c, false); }, ev)) {
    case ResidentSet::Miss::Load: bind(k, ev, b); return Routed::Loaded;
    case ResidentSet::Miss::Stream:
      b.slot = bind_transient(k);
      return b.slot >= 0 ? Routed::Streamed : Routed::DeferredStream;
    case ResidentSet::Miss::Defer: break;
  }
  return Routed::Deferred;
}

ExpertCache::Routed ExpertCache::route_stream(int layer, int expert, Binding& b) {
  MOEFLOW_CHECK(find(layer, expert) < 0 && core_->valid({layer, expert}),
                "expert cache: expert {} of layer {} cannot be streamed as a miss", expert, layer);
  b = Binding{};
  b.slot = bind_transient({layer, expert});
  return b.slot >= 0 ? Routed::Streamed : Routed::DeferredStream;
}

bool ExpertCache::serve_miss(int layer, int expert, uint64_t t, bool stream, Binding& b) {
  MOEFLOW_CHECK(find(layer, expert) < 0 && core_->valid({layer, expert}),
                "expert cache: no expert {} in layer {}", expert, layer);
  b = Binding{};
  const ExpertKey k{layer, expert};
  if (stream) {
    b.slot = bind_transient(k);
    return b.slot >= 0;
  }
  // A slot routed but never acquired is taken only when nothing else is left (a caller that
  // routes experts it does not use must not block the others).
  for (const bool allow_wanted : {false, true}) {
    ExpertKey ev;
    if (core_->serve_deferred(
            k, t, [&](ExpertKey c) { return evictable(c, allow_wanted); }, ev)) {
      bind(k, ev, b);
      return true;
    }
  }
  return false;
}

bool ExpertCache::bind_speculative(int layer, int expert, uint64_t t, Binding& b, KeyFilter kept) {
  b = Binding{};
  const ExpertKey k{layer, expert};
  ExpertKey ev;
  const auto allowed = [&](ExpertKey c) { return evictable(c, false) && !kept(c); };
  if (!core_->make_room(layer, t, allowed, ev)) return false;
  core_->insert(k, t);
  bind(k, ev, b);
  return true;
}

std::vector<int> ExpertCache::preload() {
  std::vector<int> out;
  for (ExpertKey k : core_->preload()) {
    Binding b;
    out.push_back(bind(k, {-1, -1}, b));
    slots_[b.slot].placement = true;
  }
  return out;
}

std::vector<Binding> ExpertCache::place(std::span<const double> counts, uint64_t t) {
  std::vector<Binding> out;
  for (auto [k, ev] : core_->place(counts, t, [&](ExpertKey c) { return evictable(c, false); })) {
    Binding b;
    bind(k, ev, b);
    slots_[b.slot].placement = true;
    out.push_back(b);
  }
  return out;
}

void ExpertCache::free_slot(int s) {
  Slot& sl = slots_[s];
  if (sl.state == SlotState::Free) return;
  map_[sl.key.layer][sl.key.expert] = -1;
  if (sl.transient) {
    free_transient_.push_back(s);
  } else {
    core_->evict(sl.key);
    free_.push_back(s);
  }
  sl = Slot{{-1, -1}, SlotState::Free, 0, false, false, false, sl.transient};
}

void ExpertCache::touch(int s, uint64_t t) { core_->access(slots_[s].key, t); }

bool ExpertCache::all_pinned(int layer, bool stream) const {
  if (stream) {
    for (int s = n_slots() - n_transient_; s < n_slots(); ++s)
      if (slots_[s].pins == 0) return false;
    return true;
  }
  if (!core_->full(layer)) return false;
  return !core_->any_resident(
      layer, [&](ExpertKey k) { return slots_[find(k.layer, k.expert)].pins == 0; });
}

}  // namespace moeflow
