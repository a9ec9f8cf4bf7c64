#include "policy/resident_set.h"

#include <algorithm>

#include "core/error.h"

namespace moeflow {

ResidentSet::ResidentSet(const Config& c, EvictionPolicy& policy) : cfg_(c), policy_(&policy) {
  MOEFLOW_CHECK(cfg_.n_layers > 0 && cfg_.n_experts > 0 && !cfg_.layers.empty(),
                "cache core: no experts ({} layers, {} experts per layer)", cfg_.n_layers,
                cfg_.n_experts);
  MOEFLOW_CHECK(cfg_.capacity >= 0, "cache core: negative capacity {}", cfg_.capacity);
  part_.assign(cfg_.n_layers, -1);
  for (size_t i = 0; i < cfg_.layers.size(); ++i) {
    const int l = cfg_.layers[i];
    MOEFLOW_CHECK(l >= 0 && l < cfg_.n_layers, "cache core: layer {} out of range", l);
    part_[l] = cfg_.per_layer ? static_cast<int>(i) : 0;
  }
  members_.resize(cfg_.per_layer ? cfg_.layers.size() : 1);
  for (auto& m : members_) m.reserve(cfg_.capacity);
  in_.assign(static_cast<size_t>(cfg_.n_layers) * cfg_.n_experts, 0);
  cand_.reserve(static_cast<size_t>(cfg_.capacity));
}

bool ResidentSet::valid(ExpertKey k) const {
  return part(k.layer) >= 0 && k.expert >= 0 && k.expert < cfg_.n_experts;
}

int ResidentSet::size(int layer) const {
  const int p = part(layer);
  MOEFLOW_CHECK(p >= 0, "cache core: layer {} has no experts", layer);
  return static_cast<int>(members_[p].size());
}

bool ResidentSet::any_resident(int layer, KeyFilter f) const {
  const int p = part(layer);
  MOEFLOW_CHECK(p >= 0, "cache core: layer {} has no experts", layer);
  for (uint32_t i : members_[p])
    if (f({static_cast<int>(i / cfg_.n_experts), static_cast<int>(i % cfg_.n_experts)}))
      return true;
  return false;
}

ExpertKey ResidentSet::pick_victim(int layer, uint64_t t, KeyFilter allow) {
  const int p = part(layer);
  MOEFLOW_CHECK(p >= 0, "cache core: layer {} has no experts", layer);
  cand_.clear();
  for (uint32_t i : members_[p]) {
    const ExpertKey k{static_cast<int>(i / cfg_.n_experts), static_cast<int>(i % cfg_.n_experts)};
    if (allow(k)) cand_.push_back(k);
  }
  if (cand_.empty()) return {-1, -1};
  const ExpertKey v = policy_->choose_victim(cand_, t);
  MOEFLOW_CHECK(std::find(cand_.begin(), cand_.end(), v) != cand_.end(),
                "eviction policy '{}' chose expert {} of layer {}, not a candidate",
                policy_->name(), v.expert, v.layer);
  return v;
}

bool ResidentSet::make_room(int layer, uint64_t t, KeyFilter allow, ExpertKey& evicted) {
  evicted = {-1, -1};
  if (!full(layer)) return true;
  const ExpertKey v = pick_victim(layer, t, allow);
  if (v.layer < 0) return false;
  evict(v);
  evicted = v;
  return true;
}

void ResidentSet::insert(ExpertKey k, uint64_t t) {
  MOEFLOW_CHECK(valid(k), "cache core: no expert {} in layer {}", k.expert, k.layer);
  MOEFLOW_CHECK(!contains(k), "cache core: expert {} of layer {} is already resident", k.expert,
                k.layer);
  auto& m = members_[part(k.layer)];
  MOEFLOW_CHECK(static_cast<int>(m.size()) < cfg_.capacity,
                "cache core: no room for expert {} of layer {}", k.expert, k.layer);
  const auto i = static_cast<uint32_t>(index(k));
  m.insert(std::lower_bound(m.begin(), m.end(), i), i);
  in_[i] = 1;
  policy_->on_insert(k, t);
  if (log_) log_->push_back({CacheEvent::Insert, k, t});
}

void ResidentSet::evict(ExpertKey k) {
  MOEFLOW_CHECK(contains(k), "cache core: expert {} of layer {} is not resident", k.expert,
                k.layer);
  auto& m = members_[part(k.layer)];
  const auto i = static_cast<uint32_t>(index(k));
  m.erase(std::lower_bound(m.begin(), m.end(), i));
  in_[i] = 0;
  policy_->on_evict(k);
  if (log_) log_->push_back({CacheEvent::Evict, k, 0});
}

ResidentSet::Miss ResidentSet::route_miss(ExpertKey k, uint64_t t, KeyFilter allow,
                                          ExpertKey& evicted) {
  evicted = {-1, -1};
  if (!policy_->admit(k, t)) return Miss::Stream;
  if (!make_room(k.layer, t, allow, evicted)) return Miss::Defer;
  insert(k, t);
  return Miss::Load;
}

bool ResidentSet::serve_deferred(ExpertKey k, uint64_t t, KeyFilter allow, ExpertKey& evicted) {
  if (!make_room(k.layer, t, allow, evicted)) return false;
  insert(k, t);
  return true;
}

std::vector<ExpertKey> ResidentSet::preload() {
  std::vector<ExpertKey> out;
  auto add = [&](ExpertKey k) {
    if (!valid(k) || contains(k) || full(k.layer)) return;
    insert(k, 0);
    out.push_back(k);
  };
  if (cfg_.per_layer) {
    for (int l : cfg_.layers)
      for (ExpertKey k : policy_->initial_residents(l, cfg_.capacity)) add(k);
  } else {
    for (ExpertKey k : policy_->initial_residents(-1, cfg_.capacity)) add(k);
  }
  return out;
}

std::vector<std::pair<ExpertKey, ExpertKey>> ResidentSet::place(std::span<const double> counts,
                                                                uint64_t t, KeyFilter allow) {
  policy_->on_prefill_done(counts);
  std::vector<std::pair<ExpertKey, ExpertKey>> out;
  for (ExpertKey k : policy_->take_placement_requests()) {
    if (!valid(k) || contains(k)) continue;
    ExpertKey ev;
    if (!make_room(k.layer, t, allow, ev)) continue;
    insert(k, t);
    out.push_back({k, ev});
  }
  return out;
}

}  // namespace moeflow
