#include "experts/slot_loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace moeflow {

SlotLoader::SlotLoader(const ExpertStore& store, std::shared_ptr<ChunkTransfer> transfer,
                       ExpertCache* high, ExpertCache* low, int io_threads, bool low_when_idle,
                       uint64_t low_part_bytes, SlotRewrite rewrite, std::mutex& mu,
                       std::condition_variable& cv, SlotLoaderHooks& hooks)
    : store_(store),
      transfer_(std::move(transfer)),
      cache_{high, low},
      low_part_bytes_(low_part_bytes),
      rewrite_(std::move(rewrite)),
      mu_(mu),
      cv_(cv),
      hooks_(hooks) {
  for (int t = 0; t < 2; ++t) {
    if (!cache_[t]) continue;
    io_[t].resize(cache_[t]->n_slots());
    MOEFLOW_CHECK(!rewrite_ || cache_[t]->space() == MemSpace::Host,
                  "SlotLoader: a slot rewrite needs slots in host memory");
  }
  prefetcher_ =
      std::make_unique<Prefetcher>(static_cast<ChunkSink&>(*this), io_threads, low_when_idle);
}

SlotLoader::~SlotLoader() {
  prefetcher_->stop();  // a paused speculative read re-queues itself through prefetcher_
  prefetcher_.reset();
}

// ---- the scheduler's side (all under mu_) ----

void SlotLoader::reset(int tier, int slot) { io(tier, slot) = SlotIo{}; }

bool SlotLoader::start(int tier, int slot, Priority p, float confidence) {
  const ExpertKey k = cache_[tier]->slot(slot).key;
  SlotIo& s = io(tier, slot);
  s = SlotIo{};
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (store_.chunk(k.layer, k.expert, proj, prec(tier)).aligned_len == 0) continue;
    s.ticket[proj] = ++next_ticket_;
    s.state[proj] = ChunkState::Queued;
    s.prio[proj] = p;
    ++s.pending;
    ++in_flight_;
    prefetcher_->push({static_cast<uint32_t>(slot), static_cast<uint8_t>(proj), s.ticket[proj],
                       k.layer, k.expert, confidence, 0, static_cast<uint8_t>(tier)},
                      p);
  }
  return s.pending > 0;
}

void SlotLoader::promote(int tier, int slot) {
  const ExpertKey k = cache_[tier]->slot(slot).key;
  SlotIo& s = io(tier, slot);
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (s.state[proj] != ChunkState::Queued || s.prio[proj] != Priority::Low) continue;
    // A new ticket makes the queued LOW task stale; the HIGH copy is the one that runs.
    s.ticket[proj] = ++next_ticket_;
    s.prio[proj] = Priority::High;
    prefetcher_->push({static_cast<uint32_t>(slot), static_cast<uint8_t>(proj), s.ticket[proj],
                       k.layer, k.expert, 1.0f, 0, static_cast<uint8_t>(tier)},
                      Priority::High);
  }
}

bool SlotLoader::try_cancel_speculative(int tier, int slot) {
  SlotIo& s = io(tier, slot);
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (s.state[proj] == ChunkState::None) continue;
    if (s.state[proj] != ChunkState::Queued || s.prio[proj] != Priority::Low) return false;
  }
  const uint32_t sl = static_cast<uint32_t>(slot);
  const uint8_t tier_id = static_cast<uint8_t>(tier);
  const uint64_t t0 = s.ticket[0], t1 = s.ticket[1], t2 = s.ticket[2];
  prefetcher_->drop_low_if([&](const ChunkTask& t) {
    return t.slot == sl && t.tier == tier_id &&
           (t.ticket == t0 || t.ticket == t1 || t.ticket == t2);
  });
  in_flight_ -= s.pending;
  s = SlotIo{};
  return true;
}

uint64_t SlotLoader::bytes_ahead(int tier, int slot) const {
  uint64_t bytes = 0;
  for (int u = 0; u < 2; ++u) {
    if (!cache_[u]) continue;
    for (int i = 0; i < cache_[u]->n_slots(); ++i) {
      const SlotIo& s = io(u, i);
      const bool own = u == tier && i == slot;
      if (s.pending == 0 || cache_[u]->slot(i).state != SlotState::Loading) continue;
      const ExpertKey& k = cache_[u]->slot(i).key;
      for (int proj = 0; proj < kNumExpertProj; ++proj) {
        if (s.state[proj] == ChunkState::None || s.state[proj] == ChunkState::Ready) continue;
        if (!own && s.prio[proj] != Priority::High) continue;  // speculative reads give way
        const uint64_t len = store_.chunk(k.layer, k.expert, proj, prec(u)).aligned_len;
        bytes += len - std::min(len, s.done[proj]);
      }
    }
  }
  return bytes;
}

void SlotLoader::wait_idle(std::unique_lock<std::mutex>& lk) {
  cv_.wait(lk, [&] { return in_flight_ == 0; });
}

// ---- ChunkSink: the prefetcher's workers ----

bool SlotLoader::begin(const ChunkTask& t) {
  std::lock_guard lk(mu_);
  SlotIo& s = io(t.tier, static_cast<int>(t.slot));
  if (s.ticket[t.proj] != t.ticket || s.state[t.proj] != ChunkState::Queued) return false;
  s.state[t.proj] = ChunkState::Reading;
  return true;
}

bool SlotLoader::run(const ChunkTask& t) {
  // The slot cannot be freed or rebound while a chunk is Reading, so the copy needs no lock.
  const int tier = t.tier;
  const int slot = static_cast<int>(t.slot);
  const Precision p = prec(tier);
  const uint64_t len = store_.chunk(t.layer, t.expert, t.proj, p).aligned_len;
  uint8_t* dst = cache_[tier]->slot_data(slot) + store_.slot_region(t.layer, t.expert, t.proj, p);
  uint64_t pos = 0;
  bool speculative = false;
  {
    std::lock_guard lk(mu_);
    pos = io(tier, slot).done[t.proj];
    speculative = io(tier, slot).prio[t.proj] == Priority::Low;
  }
  const uint64_t part = speculative && low_part_bytes_ ? low_part_bytes_ : len;
  for (;;) {
    const uint64_t end = std::min(len, pos + part);
    const double t0 = now_seconds();
    transfer_->copy(store_, ChunkPart{t.layer, t.expert, t.proj, p, pos, end}, dst);
    const double dt = now_seconds() - t0;
    // The last part: the matrix is whole, and still Reading (nobody computes from it yet).
    uint64_t rewritten = 0;
    double rewrite_s = 0;
    if (end == len && rewrite_) {
      const double t1 = now_seconds();
      rewritten = rewrite_chunk(t, dst);
      rewrite_s = now_seconds() - t1;
    }
    std::lock_guard lk(mu_);
    SlotIo& s = io(tier, slot);
    const uint64_t bytes = end - pos;
    pos = end;
    s.done[t.proj] = pos;
    const bool done = pos == len;
    // Give way to demand loads, unless this expert has itself been asked for meanwhile.
    const bool pause = !done && prefetcher_->high_busy() && hooks_.may_pause(tier, slot);
    hooks_.on_read({tier, t.layer, bytes, dt, done, pause, rewritten, rewrite_s});
    if (done) return true;
    if (pause) {
      s.state[t.proj] = ChunkState::Queued;
      prefetcher_->push(t, Priority::Low);
      return false;
    }
  }
}

uint64_t SlotLoader::rewrite_chunk(const ChunkTask& t, uint8_t* dst) const {
  const Precision p = prec(t.tier);
  const ExpertSlice& m = store_.index(p).layers[t.layer].slices[t.expert][t.proj];
  if (rewrite_.slot_type(m.type, m.rows) == m.type) return 0;
  const ChunkLoc& c = store_.chunk(t.layer, t.expert, t.proj, p);
  rewrite_.rewrite(m.type, dst + c.inner_offset, m.cols, m.rows);
  return c.nbytes;
}

void SlotLoader::finish(const ChunkTask& t, const std::string& error) {
  std::lock_guard lk(mu_);
  const int slot = static_cast<int>(t.slot);
  SlotIo& s = io(t.tier, slot);
  s.state[t.proj] = ChunkState::Ready;
  if (!error.empty() && s.error.empty()) s.error = error;
  --in_flight_;
  if (--s.pending == 0) hooks_.on_slot_done(t.tier, slot, s.error.empty());
  cv_.notify_all();
}

}  // namespace moeflow
