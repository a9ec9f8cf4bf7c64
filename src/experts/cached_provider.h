#pragma once
// CachedExpertProvider: ExpertProvider over ExpertStore (slow tier) + ExpertCache (RAM budget)
// + Prefetcher (I/O workers). Implements the readiness protocol of docs/offloading.md:
//   on_route   -> exact experts scheduled HIGH (queued LOW ones promoted), the layer's other
//                 LOW tasks that have not started are cancelled (early preemption)
//   residency  -> Resident / InFlight / NotStarted, for reordering
//   acquire    -> pins, then waits on a condition variable until every chunk of the expert is
//                 ready (never reads on the caller's thread); throws the I/O error if any
//   release    -> unpins
//   prefetch   -> LOW tasks ordered by confidence, only into slots that can be evicted now
// All state is guarded by one mutex; I/O runs on the prefetcher's threads without it.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "experts/expert_cache.h"
#include "experts/expert_provider.h"
#include "experts/expert_store.h"
#include "experts/offload_stats.h"
#include "experts/prefetcher.h"

namespace moeflow {

struct OffloadConfig {
  uint64_t budget_bytes = 0;  // resolved budget (see resolve_budget in offload_options.h)
  bool per_layer = false;
  int top_k = 1;
  int io_threads = 2;
  // Off = on-demand baseline: on_route() does nothing, every miss is loaded by acquire().
  bool early_preemption = true;
  // Off = prefetch() calls are ignored (on-demand / no-predictor baselines).
  bool prefetch = true;
};

class CachedExpertProvider final : public ExpertProvider, private ChunkSink {
 public:
  CachedExpertProvider(std::unique_ptr<ExpertStore> store, std::unique_ptr<EvictionPolicy> policy,
                       const OffloadConfig& cfg);
  ~CachedExpertProvider() override;

  void on_route(int layer, std::span<const int> experts) override;
  Residency residency(int layer, int expert) const override;
  ExpertView acquire(int layer, int expert, Precision p = Precision::High) override;
  void release(int layer, int expert, Precision p = Precision::High) override;
  void prefetch(int layer, std::span<const int> experts, float confidence = 1.0f) override;
  void begin_step() override {}
  void end_step() override;

  // Bit i set when chunk i (gate, up, down) of the expert is in memory; 0 if not cached.
  unsigned ready_chunks(int layer, int expert) const;
  OffloadStats stats() const;
  void reset_stats();
  const ExpertStore& store() const { return *store_; }
  ExpertStore& store() { return *store_; }
  int n_slots() const { return cache_.n_slots(); }
  // Waits until no I/O is queued or running (tests and benchmarks).
  void drain();

 private:
  enum class ChunkState : uint8_t { None = 0, Queued = 1, Reading = 2, Ready = 3 };
  struct SlotIo {
    uint64_t ticket[kNumExpertProj] = {0, 0, 0};
    ChunkState state[kNumExpertProj] = {ChunkState::None, ChunkState::None, ChunkState::None};
    Priority prio[kNumExpertProj] = {Priority::High, Priority::High, Priority::High};
    int pending = 0;
    uint8_t request_class = 0;  // 0 unset, 1 hit, 2 miss, 3 late (set on first request)
    std::string error;
  };

  // ChunkSink (called by the prefetcher's workers)
  bool begin(const ChunkTask& t) override;
  void run(const ChunkTask& t) override;
  void finish(const ChunkTask& t, const std::string& error) override;

  void schedule(int s, Priority p, float confidence);  // under mu_
  void promote(int s);                                 // under mu_
  bool cancel_low(int s);                              // under mu_
  void classify(int s, uint8_t cls);                   // under mu_
  void note_eviction(const ExpertKey& k, bool unused);  // under mu_
  void free_failed(int s);                             // under mu_
  LayerOffloadStats& ls(int layer) { return stats_.layers[layer]; }

  std::unique_ptr<ExpertStore> store_;
  OffloadConfig cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ExpertCache cache_;
  std::vector<SlotIo> io_;
  uint64_t next_ticket_ = 0;
  int in_flight_ = 0;  // chunks queued or reading
  OffloadStats stats_;
  std::unique_ptr<Prefetcher> prefetcher_;  // last: its workers stop before the rest dies
};

}  // namespace moeflow
