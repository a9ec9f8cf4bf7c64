#pragma once
// SlotLoader: the I/O state machine of an expert cache's slots. CachedExpertProvider (the route
// scheduler: which expert gets which slot, when, at what priority) tells it to read a slot's
// expert; it queues one task per chunk (gate, up, down) on a Prefetcher, copies the chunks into
// the slot through a ChunkTransfer on the prefetcher's workers, and reports back:
//
//   per chunk:  None -> Queued -> Reading -> Ready        (a paused LOW read: Reading -> Queued)
//   per slot:   start() .. every chunk Ready -> hooks.on_slot_done(ok)
//
// Tickets make queued tasks stale instead of searching the queue: promote() re-queues a slot's
// LOW chunks at HIGH under new tickets, and a worker drops a task whose ticket is no longer the
// chunk's. A speculative (LOW) chunk is read in parts (low_part_bytes) and, between parts, goes
// back to the queue when demand reads wait and the scheduler says nobody asked for its expert
// (hooks.may_pause), keeping what it read.
//
// The loader reads the caches' slots (key, state, memory) but never changes one: every slot
// state transition (Loading -> Ready / Failed, freeing) is the scheduler's, in its hooks.
//
// With a SlotRewrite (experts/slot_rewrite.h), a chunk's matrix is rewritten in place on the
// worker after its last part arrived, while the chunk is still Reading: it becomes Ready in the
// rewritten layout.
//
// Locking: one mutex, owned by the provider and passed in by reference, guards the loader's
// state and the provider's, so that a slot's load state and its I/O state change together.
// Every public method is called with it held (but the constructor, demand_busy_seconds, and the
// destructor, which must not be: it joins the workers); the hooks are called with it held. The
// loader locks it itself only on its workers (begin, the bookkeeping between the parts of run,
// finish), and copies without it: a slot is never freed or rebound while one of its chunks is
// Reading (the scheduler resets a slot's I/O state only when nothing of it is pending, or
// through try_cancel_speculative, which refuses once a chunk has started). The condition
// variable, also the provider's, is notified whenever a chunk completes.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "experts/chunk_transfer.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/prefetcher.h"
#include "experts/slot_rewrite.h"

namespace moeflow {

// What the loader tells the scheduler (all called under the shared mutex, on a worker).
class SlotLoaderHooks {
 public:
  virtual ~SlotLoaderHooks() = default;
  // Every chunk of the slot's expert arrived; ok = no read failed (then error() says why).
  virtual void on_slot_done(int tier, int slot, bool ok) = 0;
  // A speculative read may give way to demand reads between parts: nobody asked for the
  // slot's expert meanwhile.
  virtual bool may_pause(int tier, int slot) = 0;
  // One part of a chunk was read: `bytes` in `seconds`, of layer `layer` in tier `tier`;
  // `chunk_done` when it was the chunk's last part, `paused` when the chunk went back to the
  // queue after it.
  struct Read {
    int tier;
    int layer;
    uint64_t bytes;
    double seconds;
    bool chunk_done;
    bool paused;
    // Of the chunk's last part: the bytes rewritten into the slot's layout after it, and how long
    // that took (included in nothing above).
    uint64_t rewritten_bytes = 0;
    double rewrite_s = 0;
  };
  virtual void on_read(const Read& r) = 0;
};

class SlotLoader final : private ChunkSink {
 public:
  // Tier 0 is `high`'s slots, tier 1 `low`'s (null: no low-precision tier); `hooks` and the
  // caches must outlive the loader. `rewrite` (may be empty) applies to host slots only.
  SlotLoader(const ExpertStore& store, std::shared_ptr<ChunkTransfer> transfer, ExpertCache* high,
             ExpertCache* low, int io_threads, bool low_when_idle, uint64_t low_part_bytes,
             SlotRewrite rewrite, std::mutex& mu, std::condition_variable& cv,
             SlotLoaderHooks& hooks);
  // Stops the workers first: they call the hooks and re-queue paused reads.
  ~SlotLoader();
  SlotLoader(const SlotLoader&) = delete;
  SlotLoader& operator=(const SlotLoader&) = delete;

  // All below: under the shared mutex.

  // Forgets the slot's I/O state (a fresh binding, or a slot given back). Nothing of it may be
  // pending.
  void reset(int tier, int slot);
  // Queues every non-empty chunk of the slot's (bound) expert at priority p (LOW ones ordered
  // by confidence). Returns false when the expert has no bytes to read: nothing was queued and
  // on_slot_done will not come.
  bool start(int tier, int slot, Priority p, float confidence);
  // The slot is bound but its read waits for the acquire (--no-early-preemption).
  void mark_unissued(int tier, int slot) { io(tier, slot).unissued = true; }
  bool unissued(int tier, int slot) const { return io(tier, slot).unissued; }
  // Its queued LOW chunks are read at HIGH.
  void promote(int tier, int slot);
  // When every chunk of the slot is still queued at LOW, drops them from the queue, forgets
  // the slot's I/O state and returns true; otherwise (some chunk started, or is HIGH) false.
  bool try_cancel_speculative(int tier, int slot);
  bool chunk_ready(int tier, int slot, int proj) const {
    return io(tier, slot).state[proj] == ChunkState::Ready;
  }
  // The first read error of the slot's current load ("" when none).
  const std::string& error(int tier, int slot) const { return io(tier, slot).error; }
  // Bytes still to cross before `slot` of `tier` is in memory (-1: no slot): its own unread
  // chunks, at any priority, and every other slot's demand (HIGH) chunks queued or reading.
  uint64_t bytes_ahead(int tier, int slot) const;
  // Chunks queued or reading, over all slots.
  int in_flight() const { return in_flight_; }
  // Waits (releasing the lock meanwhile) until no chunk is queued or reading.
  void wait_idle(std::unique_lock<std::mutex>& lk);
  // Seconds during which demand reads were queued or running (Prefetcher::high_busy_seconds);
  // needs no lock.
  double demand_busy_seconds() const { return prefetcher_->high_busy_seconds(); }

 private:
  enum class ChunkState : uint8_t { None = 0, Queued = 1, Reading = 2, Ready = 3 };
  struct SlotIo {
    uint64_t ticket[kNumExpertProj] = {0, 0, 0};
    ChunkState state[kNumExpertProj] = {ChunkState::None, ChunkState::None, ChunkState::None};
    Priority prio[kNumExpertProj] = {Priority::High, Priority::High, Priority::High};
    uint64_t done[kNumExpertProj] = {0, 0, 0};  // bytes of a paused chunk already read
    int pending = 0;                            // chunks queued or reading
    bool unissued = false;
    std::string error;
  };

  // ChunkSink (the prefetcher's workers)
  bool begin(const ChunkTask& t) override;
  bool run(const ChunkTask& t) override;
  void finish(const ChunkTask& t, const std::string& error) override;

  SlotIo& io(int tier, int slot) { return io_[tier][slot]; }
  const SlotIo& io(int tier, int slot) const { return io_[tier][slot]; }
  static Precision prec(int tier) { return tier ? Precision::Low : Precision::High; }
  // Rewrites the chunk's matrix (at `dst`, its region of the slot) into the slot's layout when
  // the rewrite changes its type; returns the bytes rewritten (0: none).
  uint64_t rewrite_chunk(const ChunkTask& t, uint8_t* dst) const;

  const ExpertStore& store_;
  std::shared_ptr<ChunkTransfer> transfer_;
  ExpertCache* cache_[2];
  uint64_t low_part_bytes_;
  SlotRewrite rewrite_;
  std::mutex& mu_;
  std::condition_variable& cv_;
  SlotLoaderHooks& hooks_;
  std::vector<SlotIo> io_[2];  // per tier, per slot
  uint64_t next_ticket_ = 0;
  int in_flight_ = 0;                       // chunks queued or reading
  std::unique_ptr<Prefetcher> prefetcher_;  // last: its workers stop before the rest dies
};

}  // namespace moeflow
