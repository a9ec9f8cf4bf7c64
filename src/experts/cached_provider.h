#pragma once
// CachedExpertProvider: ExpertProvider over ExpertStore (slow tier) + ExpertCache (RAM budget)
// + SlotLoader (reads into the slots on the Prefetcher's I/O workers). Implements the readiness
// protocol of docs/ARCHITECTURE.md ("The MoE block protocol"):
//   on_route   -> exact experts scheduled HIGH (queued LOW ones promoted), the layer's other
//                 LOW tasks that have not started are cancelled (early preemption)
//   residency  -> Resident / InFlight / NotStarted, for reordering
//   acquire    -> pins, then waits on a condition variable until every chunk of the expert is
//                 ready (never reads on the caller's thread); throws the I/O error if any
//   release    -> unpins
//   prefetch   -> LOW tasks ordered by confidence, only into slots that can be evicted now,
//                 and only when the copy can be half done in time (ArrivalEstimate)
// Residency follows the cache core shared with the simulator (policy/resident_set.h): every
// routed expert gets its place at on_route in route order (or, with no evictable resident, at
// its acquire, after the layer's other experts were served); --no-early-preemption only
// delays the reads to acquire. Every policy hook is honoured: on_sequence_start at
// begin_sequence, initial_residents read in the background when the provider starts, admit()
// (declined misses are read into transient slots), on_prefill_done / take_placement_requests
// before a sequence's first single-token step (placements read in the background).
// With low-precision copies (HOBBIT mode, docs/lossy-modes.md) there are two caches, one per
// precision, each with its own budget, slot size and eviction policy; every call above takes
// the precision and works on that cache. The I/O queue is shared, so a routed expert of either
// precision preempts every speculative load.
// Slots in device memory (a VRAM cache): the backend reads an expert after release() returns
// (its ops run asynchronously), so released slots "retire" instead of unpinning, until the
// backend has caught up: at the next route (the router's output is on the host, so the
// backend's queue has run up to it), or at once (backend.synchronize()) when an acquire finds
// no slot free. A slot is never overwritten while a kernel may still read it.
// Two units: this class is the route scheduler (which expert gets which slot, when, at what
// priority, and everything counted about it); a SlotLoader (experts/slot_loader.h) is the I/O
// state machine of the slots: it queues, reads, pauses, promotes and cancels their chunks and
// calls back when a slot's expert has arrived (SlotLoaderHooks). One mutex, this class's, guards
// both; the loader's reads run on the prefetcher's threads without it.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "experts/arrival_estimate.h"
#include "experts/chunk_transfer.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/expert_view_table.h"
#include "experts/hybrid_rule.h"
#include "experts/offload_stats.h"
#include "experts/prefetch_gate.h"
#include "experts/prefetcher.h"
#include "experts/slot_loader.h"
#include "experts/slot_rewrite.h"
#include "model/moe/expert_provider.h"
#include "policy/resident_set.h"

namespace moeflow {

struct OffloadConfig {
  uint64_t budget_bytes = 0;  // resolved budget (resolve_budget, runtime/offload_session.h)
  bool per_layer = false;
  int top_k = 1;
  int io_threads = 2;
  // Off = on-demand baseline: on_route() does nothing, every miss is loaded by acquire().
  bool early_preemption = true;
  // Off = prefetch() calls are ignored (on-demand / no-predictor baselines).
  bool prefetch = true;
  // Speculative (LOW) chunks are read in parts of this many bytes (a multiple of 4 KiB) and
  // give the I/O thread to queued demand (HIGH) chunks between parts, keeping what they read
  // (ProMoE's chunked prefetch): a wrong guess then only costs disk time nothing else wanted.
  // 0: whole chunks, a LOW read once started is never interrupted.
  uint64_t low_part_bytes = 4ull << 20;
  // Speculative reads start only while no demand read is queued or running (see Prefetcher).
  bool low_when_idle = true;
  // Prefetches that could not be half done when their layer runs are not issued
  // (experts/arrival_estimate.h).
  bool skip_late_prefetch = true;
  // Prefetches are held back while demand reads saturate the disk and few prefetches are used
  // (experts/prefetch_gate.h). Off: every prefetch the predictor asks for is considered.
  bool prefetch_gate = true;
  // Each route first waits until the prefetches issued before it are read (or failed): every
  // prefetch arrives before the layer it is for, whatever the disk's speed. The logical model the
  // simulator replays with its `instant` profile (tests/trace/test_replay_parity.cpp); a measuring
  // mode, slow.
  bool prefetch_wait = false;
  // DuoServe's prefill pipeline: in a multi-token step, a routed miss that would evict a
  // resident streams through one of this many slots of its own instead (read in execution
  // order, the next ones as soon as a slot is free), so a prompt does not flush the experts
  // the decode steps keep. 0: off (prefill misses take places as decode misses do).
  int prefill_slots = 0;
  // A second cache for the store's low-precision copies, with this budget (0: no low tier;
  // then only Precision::High may be asked for).
  uint64_t low_budget_bytes = 0;
  // Every insertion into and eviction from the (high-precision) cache's resident set, from the
  // initial placement on, is appended here; read it after drain(). For tests that compare the
  // live cache with the simulator.
  std::vector<CacheEvent>* event_log = nullptr;
  // How chunks reach their slots (experts/chunk_transfer.h); null: file -> host slot.
  std::shared_ptr<ChunkTransfer> transfer;
  // Where the slots live (null: host RAM); a VRAM cache gets the device's allocator and a
  // device transfer (experts/device_transfer.h).
  Allocator* allocator = nullptr;
  // CPU/GPU hybrid (experts/hybrid_rule.h): with a VRAM cache, an expert not yet in VRAM at
  // acquire is served from these host views (the mapped file) for the host backend to compute,
  // when `hybrid` says the CPU finishes before its copy. Null: always wait for the copy.
  // Also handed out by host_view() (pre-calculation on the host; `hybrid` may then be unset).
  std::shared_ptr<const ExpertViewTable> host_views;
  HybridCosts hybrid;
  // Host slots only: every matrix rewritten on arrival into the compute backend's own layout
  // (experts/slot_rewrite.h); acquire's views carry the rewritten type. Empty: the file's.
  SlotRewrite rewrite;
};

class CachedExpertProvider final : public ExpertProvider, private SlotLoaderHooks {
 public:
  // `low_policy` is required when cfg.low_budget_bytes > 0.
  CachedExpertProvider(std::unique_ptr<ExpertStore> store, std::unique_ptr<EvictionPolicy> policy,
                       const OffloadConfig& cfg,
                       std::unique_ptr<EvictionPolicy> low_policy = nullptr);
  ~CachedExpertProvider() override;

  void on_route(int layer, std::span<const int> experts,
                std::span<const Precision> precisions = {}) override;
  Residency residency(int layer, int expert, Precision p = Precision::High) const override;
  ExpertView acquire(int layer, int expert, Precision p = Precision::High) override;
  // Streams on a host tier (a device tier's views are read by kernels queued ahead: it acquires).
  ExpertView acquire_streamed(int layer, int expert, Precision p = Precision::High) override;
  void await_matrix(int layer, int expert, int proj, Precision p = Precision::High) override;
  void release(int layer, int expert, Precision p = Precision::High) override;
  void prefetch(int layer, std::span<const int> experts, float confidence = 1.0f,
                Precision p = Precision::High) override;
  void expect(int layer, std::span<const int> experts, Precision p = Precision::High) override;
  bool has_low_precision() const override { return low_ != nullptr; }
  bool host_view(int layer, int expert, ExpertView& out) const override;
  MemSpace memory_space() const override { return high_.cache->space(); }
  void attach_backend(Backend& backend) override;
  void begin_sequence() override;
  void on_tokens_routed(int layer, int n_tokens, int top_k, std::span<const int32_t> experts,
                        std::span<const float> weights) override;
  void end_step() override;

  // Bit i set when chunk i (gate, up, down) of the expert is in memory; 0 if not cached.
  unsigned ready_chunks(int layer, int expert, Precision p = Precision::High) const;
  OffloadStats stats() const;
  void reset_stats();
  const ExpertStore& store() const { return *store_; }
  ExpertStore& store() { return *store_; }
  int n_slots(Precision p = Precision::High) const;
  // Places per partition (per layer, or in total for a global budget): n_slots less the
  // transient slots of a policy that declines misses, split among the partitions.
  int capacity(Precision p = Precision::High) const;
  // Waits until no I/O is queued or running and no released device slot is still retiring
  // (tests and benchmarks; on the engine thread).
  void drain();

 private:
  // How the current request for a slot's expert counts in the statistics (hits / misses /
  // late): set by its first request (route or acquire) and kept until the acquire returns or
  // the step ends, so that a route and the acquire after it count once.
  enum class RequestClass : uint8_t {
    Unset = 0,  // not requested since the last acquire or step end
    Hit = 1,    // ready when first requested
    Miss = 2,   // not cached when first requested: read for this request
    Late = 3,   // already being read when first requested (a prefetch not yet done)
  };
  // A routed miss that got no slot at route time, served at its acquire.
  struct Deferred {
    Precision prec;
    int layer, expert;
    bool stream;             // the policy declined it, or the prefill pipeline streams it
    bool pipelined = false;  // the prefill pipeline's: started as soon as a stream slot frees
    bool started = false;
  };
  // One precision's cache and how its slots' current requests count.
  struct Tier {
    Precision prec = Precision::High;
    std::unique_ptr<ExpertCache> cache;
    // Per slot. Apart from the loader's I/O state: a read issued for a request (an unissued
    // miss read at its acquire) does not change how that request counts.
    std::vector<RequestClass> request_class;
    // Experts a predictor expects ([layer * max_experts + expert]) for the rest of this token
    // (a later layer) and for the next one: a prefetch does not evict them (expect()).
    std::vector<uint8_t> expected_cur, expected_next;
    // Experts a prefetch evicted, newest last, at most n_slots (older ones would have been
    // evicted by demand since): a demand miss of one is the miss that prefetch caused.
    std::deque<ExpertKey> prefetch_victims;
  };

  // SlotLoaderHooks (called by the loader's workers, under mu_)
  void on_slot_done(int tier, int slot, bool ok) override;
  bool may_pause(int tier, int slot) override;
  void on_read(const Read& r) override;

  Tier& tier(Precision p);  // throws when the low tier is absent
  const Tier& tier(Precision p) const;
  Tier& tier_at(int id) { return id ? *low_ : high_; }
  // The loader's name for a tier.
  static int id(const Tier& T) { return T.prec == Precision::Low ? 1 : 0; }
  // acquire(), returning before the read completes when `streamed`.
  ExpertView acquire_impl(int layer, int expert, Precision p, bool streamed);
  // Starts reading slot s's expert (fresh I/O state; an expert with nothing to read is ready
  // at once), under mu_.
  void schedule(Tier& T, int s, Priority p, float confidence);
  // Forgets the slot's I/O state and request class (a fresh binding, or a slot given back),
  // under mu_.
  void reset_slot(Tier& T, int s);
  void note_prefetch_victim(Tier& T, const ExpertKey& k);  // under mu_
  bool take_prefetch_victim(Tier& T, const ExpertKey& k);  // under mu_
  bool cancel_low(Tier& T, int s);                         // under mu_
  void classify(Tier& T, int s, RequestClass cls);         // under mu_
  void note_eviction(const ExpertKey& k, bool unused);     // under mu_
  void free_failed(Tier& T, int s);                        // under mu_
  // Waits until no prefetched slot is loading (OffloadConfig::prefetch_wait).
  void await_prefetches(std::unique_lock<std::mutex>& lk);
  void route_locked(int layer, std::span<const int> experts,
                    std::span<const Precision> precisions);  // under mu_
  void route_policies(int layer, std::span<const int> experts,
                      std::span<const Precision> precisions);  // under mu_
  // Binds a routed miss to a slot (or records it for acquire), under mu_.
  void route_miss(Tier& T, int layer, int e, uint64_t t);
  void start_load(Tier& T, const Binding& b, Priority p, bool issue_now);  // under mu_
  // A routed miss bound to b.slot: fresh I/O state, counted as a miss, read at HIGH (now, or
  // at its acquire when !issue_now), under mu_.
  void start_miss(Tier& T, const Binding& b, bool issue_now);
  void load_placements(Tier& T, std::span<const int> slots);  // under mu_
  void prefill_done();                                        // under mu_
  uint64_t now(int layer) const { return logical_time(tokens_, layer, store_->n_layers()); }
  void free_transient_if_done(Tier& T, int s);  // under mu_
  // Unpins the retired slots once the backend is done with them (see above), under mu_.
  void settle_retired();
  // The prefill pipeline: starts the route's waiting streamed misses, in order, into the
  // stream slots that are free now, under mu_.
  void start_streams_ahead();
  // True when a pipelined miss waits for a stream slot and at least half the stream slots
  // are retired: a device sync now frees them while the backend still has work queued.
  bool settle_ahead_due() const;
  // Hybrid: bytes still to cross the bus before slot s (-1: not bound) is in VRAM: its own
  // unread chunks (all of them when not bound) and every demand chunk queued or reading,
  // under mu_.
  uint64_t bytes_before_ready(const Tier& T, int s) const;
  static uint64_t lease_key(Precision p, int layer, int expert) {
    return (uint64_t(p) << 62) | (uint64_t(uint32_t(layer)) << 31) | uint32_t(expert);
  }
  LayerOffloadStats& ls(int layer) { return stats_.layers[layer]; }
  // Counts an acquire of the layer's expert in precision p; the layer's statistics.
  LayerOffloadStats& count_acquire(int layer, Precision p) {
    LayerOffloadStats& st = ls(layer);
    ++st.acquires;
    if (p == Precision::Low) ++st.acquires_low;
    return st;
  }

  std::unique_ptr<ExpertStore> store_;
  OffloadConfig cfg_;
  // Guards everything here and in loader_; cv_ is notified whenever a slot's state, its pins
  // or the I/O in flight changed.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Tier high_;
  std::unique_ptr<Tier> low_;
  std::vector<Precision> all_high_;  // scratch: on_route's precisions
  std::vector<uint8_t> route_prec_;  // scratch: precisions handed to the policies
  std::vector<float> route_w_;       // scratch: gate weights handed to the policies
  std::vector<Deferred> deferred_;   // the current route's misses without a slot
  // Device slots: waits for the backend's queue (set by attach_backend), and the slots released
  // since it last did, still pinned.
  std::function<void()> device_sync_;
  std::vector<std::pair<Precision, int>> retired_;
  // Hybrid: tokens of the current step routed to each expert of the layer routed last, and the
  // experts handed out as host views (computed by the CPU), not yet released.
  std::vector<int> route_tokens_;
  // The prefetch gate and where the current step started (wall time, demand-busy seconds).
  PrefetchGate gate_;
  double step_wall0_ = -1, step_busy0_ = 0;
  std::unordered_map<uint64_t, int> host_leases_;
  // Logical time: tokens_ is the global index of the current step's first token.
  uint64_t tokens_ = 0;
  int step_tokens_ = 0;  // tokens of the current step (0: not known yet)
  int route_layer_ = 0;  // the layer routed last (prefetches are issued after it)
  // The current step's per-token choice of the layer being routed (one-token steps only).
  int tok_layer_ = -1;
  std::vector<int32_t> tok_experts_;
  std::vector<float> tok_weights_;
  // Sequence state for on_prefill_done: steps so far, whether the prefill is still open, and
  // its per-(layer, expert) token counts.
  int seq_steps_ = 0;
  bool prefill_open_ = true;
  std::vector<double> prefill_counts_;
  OffloadStats stats_;
  ArrivalEstimate arrival_;
  std::unique_ptr<SlotLoader> loader_;  // last: its workers stop before the rest dies
};

}  // namespace moeflow
