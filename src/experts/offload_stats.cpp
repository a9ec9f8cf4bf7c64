#include "experts/offload_stats.h"

namespace moeflow {

void LayerOffloadStats::add(const LayerOffloadStats& o) {
  acquires += o.acquires;
  hits += o.hits;
  misses += o.misses;
  late += o.late;
  prefetch_issued += o.prefetch_issued;
  prefetch_used += o.prefetch_used;
  prefetch_wasted += o.prefetch_wasted;
  prefetch_dropped += o.prefetch_dropped;
  prefetch_cancelled += o.prefetch_cancelled;
  prefetch_paused += o.prefetch_paused;
  prefetch_too_late += o.prefetch_too_late;
  evictions += o.evictions;
  streamed += o.streamed;
  cpu_computed += o.cpu_computed;
  prefetch_gated += o.prefetch_gated;
  prefetch_harm += o.prefetch_harm;
  placements += o.placements;
  bytes_read += o.bytes_read;
  chunks_read += o.chunks_read;
  stall_s += o.stall_s;
  read_s += o.read_s;
  bytes_rewritten += o.bytes_rewritten;
  rewrite_s += o.rewrite_s;
  acquires_low += o.acquires_low;
  hits_low += o.hits_low;
  misses_low += o.misses_low;
  late_low += o.late_low;
  bytes_read_low += o.bytes_read_low;
}

LayerOffloadStats OffloadStats::total() const {
  LayerOffloadStats t;
  for (const auto& l : layers) t.add(l);
  return t;
}

namespace {
nlohmann::json layer_json(const LayerOffloadStats& s) {
  const uint64_t req = s.hits + s.misses + s.late;
  return {
      {"acquires", s.acquires},
      {"hits", s.hits},
      {"misses", s.misses},
      {"late", s.late},
      {"hit_rate", req ? double(s.hits) / double(req) : 0.0},
      {"prefetch_issued", s.prefetch_issued},
      {"prefetch_used", s.prefetch_used},
      {"prefetch_wasted", s.prefetch_wasted},
      {"prefetch_dropped", s.prefetch_dropped},
      {"prefetch_cancelled", s.prefetch_cancelled},
      {"prefetch_paused", s.prefetch_paused},
      {"prefetch_too_late", s.prefetch_too_late},
      {"prefetch_gated", s.prefetch_gated},
      {"prefetch_harm", s.prefetch_harm},
      {"prefetch_accuracy",
       s.prefetch_issued ? double(s.prefetch_used) / double(s.prefetch_issued) : 0.0},
      {"evictions", s.evictions},
      {"streamed", s.streamed},
      {"cpu_computed", s.cpu_computed},
      {"placements", s.placements},
      {"bytes_read", s.bytes_read},
      {"bytes_read_high", s.bytes_read - s.bytes_read_low},
      {"bytes_read_low", s.bytes_read_low},
      {"acquires_low", s.acquires_low},
      {"hits_low", s.hits_low},
      {"misses_low", s.misses_low},
      {"late_low", s.late_low},
      {"chunks_read", s.chunks_read},
      {"stall_s", s.stall_s},
      {"read_s", s.read_s},
      {"bytes_rewritten", s.bytes_rewritten},
      {"rewrite_s", s.rewrite_s},
  };
}
}  // namespace

nlohmann::json OffloadStats::to_json(bool per_layer) const {
  nlohmann::json j = {
      {"policy", policy},
      {"io_backend", io_backend},
      {"direct_io", direct_io},
      {"per_layer_budget", per_layer_budget},
      {"budget_bytes", budget_bytes},
      {"slot_bytes", slot_bytes},
      {"n_slots", n_slots},
      {"n_transient_slots", n_transient_slots},
      {"io_threads", io_threads},
      {"total_expert_bytes", total_expert_bytes},
      {"has_low", has_low},
      {"low_budget_bytes", low_budget_bytes},
      {"low_slot_bytes", low_slot_bytes},
      {"low_n_slots", low_n_slots},
      {"total_low_expert_bytes", total_low_expert_bytes},
      {"total", layer_json(total())},
  };
  if (per_layer) {
    nlohmann::json arr = nlohmann::json::array();
    for (size_t l = 0; l < layers.size(); ++l) {
      nlohmann::json o = layer_json(layers[l]);
      o["layer"] = l;
      arr.push_back(std::move(o));
    }
    j["layers"] = std::move(arr);
  }
  return j;
}

}  // namespace moeflow
