#pragma once
// Whether a speculative copy can arrive before its layer runs (ProMoE's stride rule, live).
//
// A prefetch evicts a resident expert the moment its slot is taken. When the copy takes much
// longer than the disk's free time before its layer runs, the prefetch is still in flight
// when its layer runs: it saves at most that lead time, and the expert it evicted (and, for a
// wrong guess, the whole read) cost a full copy. Measured on a 1.9 GB/s O_DIRECT disk with a
// Mixtral-shaped model: copies took ~5x the one-layer lead, every prefetch was late, and the
// evictions added 20% more bytes per token; with the page cache (copies ~1.4x the lead) the same
// prefetches paid (bench/REPORT-offload.md). So a prefetch is issued only when at least half
// of it can arrive in time, judged from measured layer times, read throughput, and the share
// of time demand reads leave the disk free (speculative reads only run then; with a slow disk
// the layers are long, but because they wait for demand reads).
//
// Not thread-safe: the provider calls it under its own lock.
#include <cstdint>

namespace moeflow {

class ArrivalEstimate {
 public:
  // A copy counts as "in time" when lead time >= kMinShare x copy time.
  static constexpr double kMinShare = 0.5;

  ArrivalEstimate(int n_layers, int io_threads);

  // A layer routed at time t (seconds) in the current step; `busy` is the prefetcher's
  // high_busy_seconds() then.
  void on_route(int layer, double t, double busy);
  void on_step_end();
  // A read of `bytes` took `seconds` on one I/O thread.
  void on_read(uint64_t bytes, double seconds);

  // Layers between the last routed layer and `target` (the next token's when target is not
  // ahead): the lead a prefetch for `target` has.
  int distance(int target) const;
  // False only when both estimates exist and a copy of `bytes` for `target` would be less
  // than kMinShare done when that layer runs.
  bool in_time(int target, uint64_t bytes) const;

  double layer_seconds() const { return layer_s_; }  // 0 until measured
  double free_share() const { return free_; }        // 1 until measured
  double copy_seconds(uint64_t bytes) const;         // 0 until measured

 private:
  int n_layers_;
  int parallel_;         // I/O threads one expert's chunks spread over (one chunk per projection)
  int last_layer_ = -1;  // in this step
  double last_t_ = 0, last_busy_ = 0;
  double layer_s_ = 0;  // running mean of one layer's time
  double byte_s_ = 0;   // running mean of one I/O thread's seconds per byte
  double free_ = 1;     // running mean of the share of a layer's time without demand reads
};

}  // namespace moeflow
