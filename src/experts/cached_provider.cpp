#include "experts/cached_provider.h"

#include <chrono>

#include "core/error.h"
#include "core/timer.h"

namespace moeflow {

namespace {

CacheConfig cache_config(const ExpertStore& store, const OffloadConfig& cfg) {
  CacheConfig c;
  c.budget_bytes = cfg.budget_bytes;
  c.slot_bytes = store.slot_bytes();
  c.per_layer = cfg.per_layer;
  c.top_k = cfg.top_k;
  c.n_layers = store.n_layers();
  c.max_experts = store.max_experts();
  for (int l = 0; l < store.n_layers(); ++l) {
    if (store.is_moe_layer(l)) c.moe_layers.push_back(l);
  }
  return c;
}

}  // namespace

CachedExpertProvider::CachedExpertProvider(std::unique_ptr<ExpertStore> store,
                                           std::unique_ptr<EvictionPolicy> policy,
                                           const OffloadConfig& cfg)
    : store_(std::move(store)),
      cfg_(cfg),
      cache_(cache_config(*store_, cfg), std::move(policy)) {
  io_.resize(cache_.n_slots());
  stats_.policy = cache_.policy().name();
  stats_.io_backend = "pread";
  stats_.direct_io = store_->direct_io();
  stats_.per_layer_budget = cfg.per_layer;
  stats_.budget_bytes = cfg.budget_bytes;
  stats_.slot_bytes = cache_.slot_bytes();
  stats_.n_slots = cache_.n_slots();
  stats_.io_threads = cfg.io_threads;
  stats_.total_expert_bytes = store_->total_expert_bytes();
  stats_.layers.resize(store_->n_layers());
  prefetcher_ = std::make_unique<Prefetcher>(static_cast<ChunkSink&>(*this), cfg.io_threads);
}

CachedExpertProvider::~CachedExpertProvider() { prefetcher_.reset(); }

// ---- scheduling (all under mu_) ----

void CachedExpertProvider::schedule(int s, Priority p, float confidence) {
  const Slot& sl = cache_.slot(s);
  SlotIo& io = io_[s];
  const uint8_t cls = io.request_class;  // set by the caller for this very request
  io = SlotIo{};
  io.request_class = cls;
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (store_->chunk(sl.key.layer, sl.key.expert, proj).aligned_len == 0) continue;
    io.ticket[proj] = ++next_ticket_;
    io.state[proj] = ChunkState::Queued;
    io.prio[proj] = p;
    ++io.pending;
    ++in_flight_;
    prefetcher_->push({static_cast<uint32_t>(s), static_cast<uint8_t>(proj), io.ticket[proj],
                       sl.key.layer, sl.key.expert, confidence, 0},
                      p);
  }
  if (io.pending == 0) cache_.slot(s).state = SlotState::Ready;
}

void CachedExpertProvider::promote(int s) {
  const Slot& sl = cache_.slot(s);
  SlotIo& io = io_[s];
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (io.state[proj] != ChunkState::Queued || io.prio[proj] != Priority::Low) continue;
    // A new ticket makes the queued LOW task stale; the HIGH copy is the one that runs.
    io.ticket[proj] = ++next_ticket_;
    io.prio[proj] = Priority::High;
    prefetcher_->push({static_cast<uint32_t>(s), static_cast<uint8_t>(proj), io.ticket[proj],
                       sl.key.layer, sl.key.expert, 1.0f, 0},
                      Priority::High);
  }
}

bool CachedExpertProvider::cancel_low(int s) {
  Slot& sl = cache_.slot(s);
  SlotIo& io = io_[s];
  if (sl.state != SlotState::Loading || sl.pins > 0 || sl.wanted) return false;
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (io.state[proj] == ChunkState::None) continue;
    if (io.state[proj] != ChunkState::Queued || io.prio[proj] != Priority::Low) return false;
  }
  const uint32_t slot = static_cast<uint32_t>(s);
  const uint64_t t0 = io.ticket[0], t1 = io.ticket[1], t2 = io.ticket[2];
  prefetcher_->drop_low_if([&](const ChunkTask& t) {
    return t.slot == slot && (t.ticket == t0 || t.ticket == t1 || t.ticket == t2);
  });
  in_flight_ -= io.pending;
  LayerOffloadStats& st = ls(sl.key.layer);
  ++st.prefetch_cancelled;
  ++st.prefetch_wasted;
  io = SlotIo{};
  cache_.free_slot(s);
  cv_.notify_all();
  return true;
}

void CachedExpertProvider::classify(int s, uint8_t cls) {
  SlotIo& io = io_[s];
  if (io.request_class != 0) return;
  io.request_class = cls;
  LayerOffloadStats& st = ls(cache_.slot(s).key.layer);
  if (cls == 1) ++st.hits;
  if (cls == 2) ++st.misses;
  if (cls == 3) ++st.late;
}

void CachedExpertProvider::note_eviction(const ExpertKey& k, bool unused) {
  if (k.layer < 0) return;
  ++ls(k.layer).evictions;
  if (unused) ++ls(k.layer).prefetch_wasted;
}

void CachedExpertProvider::free_failed(int s) {
  Slot& sl = cache_.slot(s);
  if (sl.prefetched) ++ls(sl.key.layer).prefetch_wasted;
  io_[s] = SlotIo{};
  cache_.free_slot(s);
}

// ---- protocol ----

void CachedExpertProvider::on_route(int layer, std::span<const int> experts) {
  if (!cfg_.early_preemption) return;
  std::lock_guard lk(mu_);
  for (int e : experts) {
    int s = cache_.find(layer, e);
    if (s < 0) {
      ExpertKey ev;
      bool unused = false;
      s = cache_.allocate(layer, e, /*steal_wanted=*/false, ev, unused);
      if (s < 0) continue;  // no slot now: acquire() will load it on demand
      note_eviction(ev, unused);
      classify(s, 2);
      schedule(s, Priority::High, 1.0f);
    } else {
      const SlotState st = cache_.slot(s).state;
      classify(s, st == SlotState::Loading ? 3 : 1);
      if (st == SlotState::Loading) promote(s);
    }
    cache_.slot(s).wanted = true;
  }
  // Speculative loads for this layer that the router did not pick are now useless.
  const int n = store_->n_experts(layer);
  for (int e = 0; e < n; ++e) {
    const int s = cache_.find(layer, e);
    if (s >= 0 && !cache_.slot(s).wanted) cancel_low(s);
  }
}

Residency CachedExpertProvider::residency(int layer, int expert) const {
  std::lock_guard lk(mu_);
  const int s = cache_.find(layer, expert);
  if (s < 0) return Residency::NotStarted;
  switch (cache_.slot(s).state) {
    case SlotState::Ready:
      return Residency::Resident;
    case SlotState::Loading:
      return Residency::InFlight;
    default:
      return Residency::NotStarted;
  }
}

ExpertView CachedExpertProvider::acquire(int layer, int expert, Precision) {
  MOEFLOW_CHECK(expert >= 0 && expert < store_->n_experts(layer),
                "acquire: layer {} has no expert {}", layer, expert);
  std::unique_lock lk(mu_);
  const double t0 = now_seconds();
  bool waited = false;
  int s = -1;
  for (;;) {
    s = cache_.find(layer, expert);
    if (s >= 0) break;
    ExpertKey ev;
    bool unused = false;
    s = cache_.allocate(layer, expert, /*steal_wanted=*/true, ev, unused);
    if (s >= 0) {
      note_eviction(ev, unused);
      classify(s, 2);
      schedule(s, Priority::High, 1.0f);
      break;
    }
    if (cache_.all_pinned(layer)) {
      fail("expert cache: all {} slots are acquired and not released; the budget ({} bytes) "
           "is too small for the experts layer {} holds at once (raise --expert-cache)",
           cache_.n_slots(), cfg_.budget_bytes, layer);
    }
    // Every slot is loading: one will finish and become evictable.
    waited = true;
    cv_.wait(lk);
  }
  Slot& sl = cache_.slot(s);
  classify(s, sl.state == SlotState::Loading ? 3 : 1);
  if (sl.state == SlotState::Loading) promote(s);
  ++sl.pins;
  sl.wanted = false;
  LayerOffloadStats& st = ls(layer);
  ++st.acquires;
  if (sl.prefetched) {
    sl.prefetched = false;
    ++st.prefetch_used;
  }
  cache_.touch(s);
  if (sl.state == SlotState::Loading) {
    waited = true;
    cv_.wait(lk, [&] { return sl.state != SlotState::Loading; });
  }
  if (waited) st.stall_s += now_seconds() - t0;
  io_[s].request_class = 0;
  if (sl.state == SlotState::Failed) {
    const std::string err = io_[s].error;
    if (--sl.pins == 0) free_failed(s);
    cv_.notify_all();
    throw Error(err);
  }
  ExpertView v;
  const uint8_t* base = cache_.slot_data(s);
  const auto& slices = store_->index().layers[layer].slices[expert];
  for (int p = 0; p < kNumExpertProj; ++p) {
    const ChunkLoc& c = store_->chunk(layer, expert, p);
    v.type[p] = slices[p].type;
    v.rows[p] = slices[p].rows;
    v.cols[p] = slices[p].cols;
    v.data[p] = c.nbytes ? base + store_->slot_region(layer, expert, p) + c.inner_offset : nullptr;
  }
  return v;
}

void CachedExpertProvider::release(int layer, int expert, Precision) {
  std::lock_guard lk(mu_);
  const int s = cache_.find(layer, expert);
  MOEFLOW_CHECK(s >= 0 && cache_.slot(s).pins > 0,
                "release: expert {} of layer {} is not acquired", expert, layer);
  --cache_.slot(s).pins;
  cv_.notify_all();
}

void CachedExpertProvider::prefetch(int layer, std::span<const int> experts, float confidence) {
  if (!cfg_.prefetch) return;
  std::lock_guard lk(mu_);
  for (int e : experts) {
    if (e < 0 || e >= store_->n_experts(layer)) continue;
    if (cache_.find(layer, e) >= 0) continue;
    ExpertKey ev;
    bool unused = false;
    const int s = cache_.allocate(layer, e, /*steal_wanted=*/false, ev, unused);
    if (s < 0) {
      ++ls(layer).prefetch_dropped;
      continue;
    }
    note_eviction(ev, unused);
    cache_.slot(s).prefetched = true;
    ++ls(layer).prefetch_issued;
    schedule(s, Priority::Low, confidence);
  }
}

void CachedExpertProvider::end_step() {
  std::lock_guard lk(mu_);
  for (int s = 0; s < cache_.n_slots(); ++s) {
    cache_.slot(s).wanted = false;
    io_[s].request_class = 0;
  }
}

unsigned CachedExpertProvider::ready_chunks(int layer, int expert) const {
  std::lock_guard lk(mu_);
  const int s = cache_.find(layer, expert);
  if (s < 0) return 0;
  unsigned m = 0;
  for (int p = 0; p < kNumExpertProj; ++p) {
    if (io_[s].state[p] == ChunkState::Ready) m |= 1u << p;
  }
  return m;
}

OffloadStats CachedExpertProvider::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void CachedExpertProvider::reset_stats() {
  std::lock_guard lk(mu_);
  for (auto& l : stats_.layers) l = LayerOffloadStats{};
}

void CachedExpertProvider::drain() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return in_flight_ == 0; });
}

// ---- ChunkSink: prefetcher worker side ----

bool CachedExpertProvider::begin(const ChunkTask& t) {
  std::lock_guard lk(mu_);
  SlotIo& io = io_[t.slot];
  if (io.ticket[t.proj] != t.ticket || io.state[t.proj] != ChunkState::Queued) return false;
  io.state[t.proj] = ChunkState::Reading;
  return true;
}

void CachedExpertProvider::run(const ChunkTask& t) {
  // The slot cannot be freed or rebound while a chunk is Reading, so no lock is needed here.
  const double t0 = now_seconds();
  store_->read(t.layer, t.expert, t.proj,
               cache_.slot_data(static_cast<int>(t.slot)) +
                   store_->slot_region(t.layer, t.expert, t.proj));
  const double dt = now_seconds() - t0;
  std::lock_guard lk(mu_);
  LayerOffloadStats& st = ls(t.layer);
  st.read_s += dt;
  st.bytes_read += store_->chunk(t.layer, t.expert, t.proj).aligned_len;
  ++st.chunks_read;
}

void CachedExpertProvider::finish(const ChunkTask& t, const std::string& error) {
  std::lock_guard lk(mu_);
  const int s = static_cast<int>(t.slot);
  SlotIo& io = io_[s];
  io.state[t.proj] = ChunkState::Ready;
  if (!error.empty() && io.error.empty()) io.error = error;
  --in_flight_;
  if (--io.pending == 0) {
    Slot& sl = cache_.slot(s);
    if (io.error.empty()) {
      sl.state = SlotState::Ready;
    } else {
      sl.state = SlotState::Failed;
      // Nobody waits on a failed prefetch: forget it so the next acquire retries the read
      // and reports the error itself.
      if (sl.pins == 0) free_failed(s);
    }
  }
  cv_.notify_all();
}

}  // namespace moeflow
