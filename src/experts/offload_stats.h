#pragma once
// Counters of the offloading tier, per layer and in total, printable as one JSON object.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moeflow {

struct LayerOffloadStats {
  uint64_t acquires = 0;
  uint64_t hits = 0;    // resident when first requested (route or acquire)
  uint64_t misses = 0;  // not resident nor in flight when first requested
  uint64_t late = 0;    // in flight when first requested (a prefetch not yet done)
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;     // a prefetched expert later acquired
  uint64_t prefetch_wasted = 0;   // evicted or cancelled before any use
  uint64_t prefetch_dropped = 0;  // not issued: no evictable slot
  uint64_t prefetch_cancelled = 0;
  uint64_t prefetch_too_late = 0;  // not issued: could not be half done when its layer runs
  uint64_t prefetch_paused = 0;    // a speculative read stopped part-way for a demand read
  uint64_t evictions = 0;
  uint64_t streamed = 0;        // misses the policy declined, read into a transient slot
  uint64_t prefetch_gated = 0;  // held back by the gate (read-bound and inaccurate, or no net gain)
  uint64_t prefetch_harm = 0;   // demand misses of experts a prefetch had evicted
  uint64_t cpu_computed = 0;    // hybrid: experts computed by the CPU instead of waited for
  uint64_t placements = 0;      // loads the policy's placement asked for (initial, after prefill)
  uint64_t bytes_read = 0;      // aligned bytes read from the store (both precisions)
  uint64_t chunks_read = 0;
  double stall_s = 0;  // time acquire() waited (critical-path stall)
  double read_s = 0;   // summed read time of this layer's chunks (all workers)
  // Matrices rewritten on arrival into the compute backend's layout (OffloadConfig::rewrite):
  // their bytes and the workers' time spent on it.
  uint64_t bytes_rewritten = 0;
  double rewrite_s = 0;
  // The low-precision tier's share of the counters above (HOBBIT mode; zero otherwise).
  uint64_t acquires_low = 0;
  uint64_t hits_low = 0;
  uint64_t misses_low = 0;
  uint64_t late_low = 0;
  uint64_t bytes_read_low = 0;

  void add(const LayerOffloadStats& o);
};

struct OffloadStats {
  std::string policy;
  std::string io_backend;
  bool direct_io = true;
  bool per_layer_budget = false;
  uint64_t budget_bytes = 0;
  uint64_t slot_bytes = 0;
  int n_slots = 0;
  int n_transient_slots = 0;  // of n_slots, kept for the misses a policy streams
  int io_threads = 0;
  uint64_t total_expert_bytes = 0;
  // Low-precision tier (files packed with --low): its own budget and slots.
  bool has_low = false;
  uint64_t low_budget_bytes = 0;
  uint64_t low_slot_bytes = 0;
  int low_n_slots = 0;
  uint64_t total_low_expert_bytes = 0;
  std::vector<LayerOffloadStats> layers;  // indexed by model layer

  LayerOffloadStats total() const;
  nlohmann::json to_json(bool per_layer = true) const;
};

}  // namespace moeflow
