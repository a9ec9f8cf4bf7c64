#include "experts/cached_provider.h"

#include <algorithm>
#include <chrono>

#include "backend/backend.h"
#include "core/error.h"
#include "core/timer.h"

namespace moeflow {

namespace {

CacheConfig cache_config(const ExpertStore& store, const OffloadConfig& cfg, Precision p) {
  CacheConfig c;
  c.budget_bytes = p == Precision::Low ? cfg.low_budget_bytes : cfg.budget_bytes;
  c.slot_bytes = store.slot_bytes(p);
  c.per_layer = cfg.per_layer;
  c.top_k = cfg.top_k;
  c.n_layers = store.n_layers();
  c.max_experts = store.max_experts();
  c.allocator = cfg.allocator;
  c.stream_slots = p == Precision::High ? cfg.prefill_slots : 0;
  for (int l = 0; l < store.n_layers(); ++l) {
    if (store.is_moe_layer(l)) c.moe_layers.push_back(l);
  }
  if (p == Precision::Low) {
    c.what = "low-precision expert cache";
    c.raise_with = "--low-cache or --low-cache-rate";
  }
  return c;
}

}  // namespace

CachedExpertProvider::CachedExpertProvider(std::unique_ptr<ExpertStore> store,
                                           std::unique_ptr<EvictionPolicy> policy,
                                           const OffloadConfig& cfg,
                                           std::unique_ptr<EvictionPolicy> low_policy)
    : store_(std::move(store)), cfg_(cfg), arrival_(store_->n_layers(), cfg.io_threads) {
  high_.cache =
      std::make_unique<ExpertCache>(cache_config(*store_, cfg, Precision::High), std::move(policy));
  high_.cache->set_event_log(cfg.event_log);
  high_.request_class.resize(high_.cache->n_slots());
  if (cfg.low_budget_bytes > 0) {
    MOEFLOW_CHECK(store_->has_low(),
                  "{}: a low-precision cache was asked for, but the file has no low-precision "
                  "expert copies (pack it with `moeflow pack --low TYPE`)",
                  store_->path());
    MOEFLOW_CHECK(low_policy != nullptr, "expert cache: no eviction policy for the low tier");
    low_ = std::make_unique<Tier>();
    low_->prec = Precision::Low;
    low_->cache = std::make_unique<ExpertCache>(cache_config(*store_, cfg, Precision::Low),
                                                std::move(low_policy));
    low_->request_class.resize(low_->cache->n_slots());
  }
  stats_.policy = high_.cache->policy().name();
  std::shared_ptr<ChunkTransfer> transfer =
      cfg.transfer ? cfg.transfer : std::shared_ptr<ChunkTransfer>(make_host_chunk_transfer());
  stats_.io_backend = transfer->name();
  stats_.direct_io = store_->direct_io();
  stats_.per_layer_budget = cfg.per_layer;
  stats_.budget_bytes = cfg.budget_bytes;
  stats_.slot_bytes = high_.cache->slot_bytes();
  stats_.n_slots = high_.cache->n_slots();
  stats_.io_threads = cfg.io_threads;
  stats_.total_expert_bytes = store_->total_expert_bytes();
  if (low_) {
    stats_.has_low = true;
    stats_.low_budget_bytes = cfg.low_budget_bytes;
    stats_.low_slot_bytes = low_->cache->slot_bytes();
    stats_.low_n_slots = low_->cache->n_slots();
    stats_.total_low_expert_bytes = store_->total_expert_bytes(Precision::Low);
  }
  stats_.layers.resize(store_->n_layers());
  for (Tier* T : {&high_, low_.get()}) {
    if (!T) continue;
    const size_t n = static_cast<size_t>(store_->n_layers()) * store_->max_experts();
    T->expected_cur.assign(n, 0);
    T->expected_next.assign(n, 0);
  }
  stats_.n_transient_slots = high_.cache->n_transient();
  prefill_counts_.assign(static_cast<size_t>(store_->n_layers()) * store_->max_experts(), 0.0);
  loader_ = std::make_unique<SlotLoader>(*store_, std::move(transfer), high_.cache.get(),
                                         low_ ? low_->cache.get() : nullptr, cfg.io_threads,
                                         cfg.low_when_idle, cfg.low_part_bytes, cfg.rewrite, mu_,
                                         cv_, static_cast<SlotLoaderHooks&>(*this));
  // The policy's initial placement is read in the background from the start; a routed expert
  // among it is raised to HIGH like any other load in flight.
  std::lock_guard lk(mu_);
  for (Tier* T : {&high_, low_.get()})
    if (T) load_placements(*T, T->cache->preload());
}

CachedExpertProvider::~CachedExpertProvider() {
  loader_.reset();  // its workers call back into this provider
}

CachedExpertProvider::Tier& CachedExpertProvider::tier(Precision p) {
  return const_cast<Tier&>(static_cast<const CachedExpertProvider*>(this)->tier(p));
}

const CachedExpertProvider::Tier& CachedExpertProvider::tier(Precision p) const {
  if (p == Precision::High) return high_;
  if (!low_)
    fail(
        "expert cache: a low-precision expert was asked for, but no low-precision cache is set "
        "up (--mode hobbit on a file packed with `moeflow pack --low TYPE`)");
  return *low_;
}

int CachedExpertProvider::n_slots(Precision p) const { return tier(p).cache->n_slots(); }

int CachedExpertProvider::capacity(Precision p) const { return tier(p).cache->capacity(); }

// ---- scheduling (all under mu_) ----

void CachedExpertProvider::schedule(Tier& T, int s, Priority p, float confidence) {
  if (!loader_->start(id(T), s, p, confidence)) T.cache->slot(s).state = SlotState::Ready;
}

void CachedExpertProvider::reset_slot(Tier& T, int s) {
  loader_->reset(id(T), s);
  T.request_class[s] = RequestClass::Unset;
}

bool CachedExpertProvider::cancel_low(Tier& T, int s) {
  Slot& sl = T.cache->slot(s);
  // Placement loads are the policy's, not guesses: routing elsewhere does not make them useless.
  if (sl.state != SlotState::Loading || sl.pins > 0 || sl.wanted || sl.placement) return false;
  if (!loader_->try_cancel_speculative(id(T), s)) return false;
  LayerOffloadStats& st = ls(sl.key.layer);
  ++st.prefetch_cancelled;
  ++st.prefetch_wasted;
  gate_.on_outcome(false);
  T.request_class[s] = RequestClass::Unset;
  T.cache->free_slot(s);
  cv_.notify_all();
  return true;
}

void CachedExpertProvider::classify(Tier& T, int s, RequestClass cls) {
  if (T.request_class[s] != RequestClass::Unset) return;
  T.request_class[s] = cls;
  LayerOffloadStats& st = ls(T.cache->slot(s).key.layer);
  const bool low = T.prec == Precision::Low;
  if (cls == RequestClass::Hit) ++st.hits, st.hits_low += low;
  if (cls == RequestClass::Miss) ++st.misses, st.misses_low += low;
  if (cls == RequestClass::Late) ++st.late, st.late_low += low;
}

void CachedExpertProvider::note_eviction(const ExpertKey& k, bool unused) {
  if (k.layer < 0) return;
  ++ls(k.layer).evictions;
  if (unused) {
    ++ls(k.layer).prefetch_wasted;
    gate_.on_outcome(false);
  }
}

void CachedExpertProvider::free_failed(Tier& T, int s) {
  Slot& sl = T.cache->slot(s);
  if (sl.prefetched) ++ls(sl.key.layer).prefetch_wasted;
  reset_slot(T, s);
  T.cache->free_slot(s);
}

// A transient slot serves one use: it goes back once nobody holds or awaits it.
void CachedExpertProvider::free_transient_if_done(Tier& T, int s) {
  const Slot& sl = T.cache->slot(s);
  if (!sl.transient || sl.pins > 0 || sl.wanted || sl.state == SlotState::Loading ||
      sl.state == SlotState::Free)
    return;
  reset_slot(T, s);
  T.cache->free_slot(s);
  cv_.notify_all();
}

void CachedExpertProvider::start_load(Tier& T, const Binding& b, Priority p, bool issue_now) {
  note_eviction(b.evicted, b.evicted_unused);
  if (issue_now) {
    schedule(T, b.slot, p, 1.0f);
  } else {
    loader_->mark_unissued(id(T), b.slot);
  }
}

void CachedExpertProvider::start_miss(Tier& T, const Binding& b, bool issue_now) {
  reset_slot(T, b.slot);
  classify(T, b.slot, RequestClass::Miss);
  const ExpertKey k = T.cache->slot(b.slot).key;
  if (take_prefetch_victim(T, k)) {
    ++ls(k.layer).prefetch_harm;
    gate_.on_harm();
  }
  start_load(T, b, Priority::High, issue_now);
}

void CachedExpertProvider::note_prefetch_victim(Tier& T, const ExpertKey& k) {
  if (k.layer < 0) return;
  T.prefetch_victims.push_back(k);
  while (T.prefetch_victims.size() > static_cast<size_t>(T.cache->n_slots()))
    T.prefetch_victims.pop_front();
}

bool CachedExpertProvider::take_prefetch_victim(Tier& T, const ExpertKey& k) {
  auto it = std::find(T.prefetch_victims.begin(), T.prefetch_victims.end(), k);
  if (it == T.prefetch_victims.end()) return false;
  T.prefetch_victims.erase(it);
  return true;
}

void CachedExpertProvider::load_placements(Tier& T, std::span<const int> slots) {
  for (int s : slots) {
    reset_slot(T, s);
    ++ls(T.cache->slot(s).key.layer).placements;
    schedule(T, s, Priority::Low, 1.0f);
  }
}

void CachedExpertProvider::prefill_done() {
  prefill_open_ = false;
  // As if at the prefill's last layer, which is where the simulator places them.
  const uint64_t t = tokens_ > 0 ? logical_time(tokens_, 0, store_->n_layers()) - 1 : 0;
  for (Tier* T : {&high_, low_.get()}) {
    if (!T) continue;
    std::vector<int> slots;
    for (const Binding& b : T->cache->place(prefill_counts_, t)) {
      note_eviction(b.evicted, b.evicted_unused);
      slots.push_back(b.slot);
    }
    load_placements(*T, slots);
  }
}

// Every policy sees the step's routed experts (union, rank order), their gate weights when the
// step has one token, and, where two precisions are cached (HOBBIT's LHU term counts uses per
// precision), the precision each was asked for. Without a low tier no use has a precision to
// report, and HOBBIT judges by gate weight, as in the simulator.
void CachedExpertProvider::route_policies(int layer, std::span<const int> experts,
                                          std::span<const Precision> precisions) {
  route_prec_.resize(experts.size());
  for (size_t i = 0; i < experts.size(); ++i)
    route_prec_[i] = static_cast<uint8_t>(i < precisions.size() ? precisions[i] : Precision::High);
  route_w_.clear();
  if (step_tokens_ == 1 && tok_layer_ == layer && tok_weights_.size() == tok_experts_.size()) {
    for (int e : experts) {
      const auto it = std::find(tok_experts_.begin(), tok_experts_.end(), e);
      route_w_.push_back(it == tok_experts_.end() ? 0.0f : tok_weights_[it - tok_experts_.begin()]);
    }
  }
  RouteEvent ev{layer, tokens_, step_tokens_ > 1, experts, route_w_};
  if (low_) ev.precisions = route_prec_;
  high_.cache->policy().on_route(ev);
  if (low_) low_->cache->policy().on_route(ev);
}

// ---- protocol ----

void CachedExpertProvider::on_route(int layer, std::span<const int> experts,
                                    std::span<const Precision> precisions) {
  MOEFLOW_CHECK(precisions.empty() || precisions.size() == experts.size(),
                "on_route: {} experts but {} precisions", experts.size(), precisions.size());
  std::unique_lock lk(mu_);
  if (cfg_.prefetch_wait) await_prefetches(lk);
  if (precisions.empty()) {
    all_high_.assign(experts.size(), Precision::High);
    precisions = all_high_;
  }
  route_locked(layer, experts, precisions);
}

// The prefetches issued since the last route are read before this one: each arrives before its
// layer runs, and within one layer's batch they take their places while the others are still
// loading (not evictable), as without waiting.
void CachedExpertProvider::await_prefetches(std::unique_lock<std::mutex>& lk) {
  const auto loading = [&] {
    for (Tier* T : {&high_, low_.get()}) {
      if (!T) continue;
      for (int s = 0; s < T->cache->n_slots(); ++s) {
        const Slot& sl = T->cache->slot(s);
        if (sl.prefetched && sl.state == SlotState::Loading) return true;
      }
    }
    return false;
  };
  cv_.wait(lk, [&] { return !loading(); });
}

void CachedExpertProvider::route_locked(int layer, std::span<const int> experts,
                                        std::span<const Precision> precisions) {
  settle_retired();
  arrival_.on_route(layer, now_seconds(), loader_->demand_busy_seconds());
  route_layer_ = layer;
  // The layer has routed: what was expected of it is no longer a reason to keep an expert.
  for (Tier* T : {&high_, low_.get()}) {
    if (!T || layer < 0 || layer >= store_->n_layers()) continue;
    const auto row = T->expected_cur.begin() + static_cast<long>(layer) * store_->max_experts();
    std::fill(row, row + store_->max_experts(), 0);
  }
  const uint64_t t = now(layer);
  route_policies(layer, experts, precisions);
  deferred_.clear();
  // The layer's routed experts that hold a slot are protected from this route's misses (the
  // core's rule); speculative loads for the layer that the router did not pick are useless
  // now and give their places back before the misses look for room.
  for (size_t i = 0; i < experts.size(); ++i) {
    if (precisions[i] == Precision::Low && !low_) continue;  // acquire() reports it
    Tier& T = tier(precisions[i]);
    const int s = T.cache->find(layer, experts[i]);
    if (s >= 0) T.cache->slot(s).wanted = true;
  }
  if (cfg_.early_preemption) {
    const int n = store_->n_experts(layer);
    for (Tier* T : {&high_, low_.get()}) {
      if (!T) continue;
      for (int e = 0; e < n; ++e) {
        const int s = T->cache->find(layer, e);
        if (s >= 0 && !T->cache->slot(s).wanted) cancel_low(*T, s);
      }
    }
  }
  for (size_t i = 0; i < experts.size(); ++i) {
    if (precisions[i] == Precision::Low && !low_) continue;
    Tier& T = tier(precisions[i]);
    const int e = experts[i];
    const int s = T.cache->find(layer, e);
    if (s < 0) {
      route_miss(T, layer, e, t);
      continue;
    }
    const SlotState st = T.cache->slot(s).state;
    classify(T, s, st == SlotState::Loading ? RequestClass::Late : RequestClass::Hit);
    if (st == SlotState::Loading && cfg_.early_preemption) loader_->promote(id(T), s);
  }
}

// Without early preemption the place is still decided here, so that residency does not depend
// on that setting; only the read waits for acquire().
void CachedExpertProvider::route_miss(Tier& T, int layer, int e, uint64_t t) {
  Binding b;
  const bool pipelined = cfg_.prefill_slots > 0 && T.prec == Precision::High && step_tokens_ > 1 &&
                         T.cache->full(layer);
  switch (pipelined ? T.cache->route_stream(layer, e, b) : T.cache->route_miss(layer, e, t, b)) {
    case ExpertCache::Routed::Streamed: ++ls(layer).streamed; [[fallthrough]];
    case ExpertCache::Routed::Loaded:
      T.cache->slot(b.slot).wanted = true;
      start_miss(T, b, cfg_.early_preemption);
      break;
    case ExpertCache::Routed::Deferred: deferred_.push_back({T.prec, layer, e, false}); break;
    case ExpertCache::Routed::DeferredStream:
      deferred_.push_back({T.prec, layer, e, true, pipelined});
      break;
  }
}

void CachedExpertProvider::start_streams_ahead() {
  for (Deferred& d : deferred_) {
    if (!d.pipelined || d.started) continue;
    Tier& T = tier(d.prec);
    if (T.cache->find(d.layer, d.expert) >= 0) {  // acquired meanwhile
      d.started = true;
      continue;
    }
    Binding b;
    if (!T.cache->serve_miss(d.layer, d.expert, now(d.layer), true, b)) return;
    d.started = true;
    ++ls(d.layer).streamed;
    T.cache->slot(b.slot).wanted = true;
    start_miss(T, b, true);
  }
}

bool CachedExpertProvider::settle_ahead_due() const {
  if (!device_sync_ || cfg_.prefill_slots <= 0) return false;
  const bool waiting = std::any_of(deferred_.begin(), deferred_.end(),
                                   [](const Deferred& d) { return d.pipelined && !d.started; });
  if (!waiting) return false;
  int retired_streams = 0;
  for (auto [p, s] : retired_) retired_streams += tier(p).cache->slot(s).transient;
  return 2 * retired_streams >= std::max(1, cfg_.prefill_slots);
}

Residency CachedExpertProvider::residency(int layer, int expert, Precision p) const {
  std::lock_guard lk(mu_);
  if (p == Precision::Low && !low_) return Residency::NotStarted;
  const Tier& T = tier(p);
  const int s = T.cache->find(layer, expert);
  if (s < 0) return Residency::NotStarted;
  switch (T.cache->slot(s).state) {
    case SlotState::Ready: return Residency::Resident;
    case SlotState::Loading: return Residency::InFlight;
    default: return Residency::NotStarted;
  }
}

ExpertView CachedExpertProvider::acquire(int layer, int expert, Precision p) {
  return acquire_impl(layer, expert, p, false);
}

ExpertView CachedExpertProvider::acquire_streamed(int layer, int expert, Precision p) {
  return acquire_impl(layer, expert, p, !device_sync_ && !cfg_.host_views);
}

ExpertView CachedExpertProvider::acquire_impl(int layer, int expert, Precision p, bool streamed) {
  MOEFLOW_CHECK(expert >= 0 && expert < store_->n_experts(layer),
                "acquire: layer {} has no expert {}", layer, expert);
  std::unique_lock lk(mu_);
  // The prefill pipeline on a device: the backend has the units before this one queued, so a
  // sync now costs it only a gap before this unit's kernels, and the freed stream slots start
  // the next copies under that compute.
  if (settle_ahead_due()) settle_retired();
  Tier& T = tier(p);
  ExpertCache& cache = *T.cache;
  const uint64_t t = now(layer);
  const double t0 = now_seconds();
  bool waited = false;
  int s = cache.find(layer, expert);
  if (cfg_.host_views && (s < 0 || cache.slot(s).state != SlotState::Ready)) {
    // Hybrid: the CPU computes it if that is sooner than its copy; the copy (if any) goes on,
    // so the next use finds it in VRAM.
    const int n = route_tokens_.empty() ? 1 : std::max(1, route_tokens_[expert]);
    if (prefer_cpu(cfg_.hybrid, n, bytes_before_ready(T, s))) {
      ++host_leases_[lease_key(p, layer, expert)];
      ++count_acquire(layer, p).cpu_computed;
      if (s >= 0) cache.touch(s, t);
      return cfg_.host_views->at(layer, expert, p);
    }
  }
  if (s < 0) {
    // A miss that got no slot at route time (or was never routed): its place is decided now,
    // after the layer's other experts were served, so those are candidates too.
    bool stream = false, routed = false;
    for (const Deferred& d : deferred_) {
      if (d.prec == p && d.layer == layer && d.expert == expert) {
        stream = d.stream;
        routed = true;
        break;
      }
    }
    if (!routed) stream = !cache.admits(layer, expert, t);
    for (;;) {
      s = cache.find(layer, expert);  // another caller may have brought it meanwhile
      if (s >= 0) break;
      Binding b;
      if (cache.serve_miss(layer, expert, t, stream, b)) {
        s = b.slot;
        if (stream) ++ls(layer).streamed;
        start_miss(T, b, true);
        break;
      }
      if (!retired_.empty()) {  // slots the backend may be done with: make sure and retry
        settle_retired();
        continue;
      }
      if (cache.all_pinned(layer, stream)) {
        const bool low = p == Precision::Low;
        if (stream)
          fail(
              "{}: all {} transient slots (for the misses policy '{}' does not cache) are acquired "
              "and not released",
              low ? "low-precision expert cache" : "expert cache", cache.n_transient(),
              cache.policy().name());
        fail(
            "{}: all {} slots are acquired and not released; the budget ({} bytes) is too small "
            "for the experts layer {} holds at once (raise {})",
            low ? "low-precision expert cache" : "expert cache", cache.n_slots(),
            low ? cfg_.low_budget_bytes : cfg_.budget_bytes, layer,
            low ? "--low-cache" : "--expert-cache");
      }
      // Every candidate is loading or held: one will become free.
      waited = true;
      cv_.wait(lk);
    }
  }
  Slot& sl = cache.slot(s);
  // Bound at route, read now (--no-early-preemption).
  if (loader_->unissued(id(T), s)) schedule(T, s, Priority::High, 1.0f);
  classify(T, s, sl.state == SlotState::Loading ? RequestClass::Late : RequestClass::Hit);
  if (sl.state == SlotState::Loading) loader_->promote(id(T), s);
  ++sl.pins;
  sl.wanted = false;
  LayerOffloadStats& st = count_acquire(layer, p);
  if (sl.prefetched) {
    sl.prefetched = false;
    ++st.prefetch_used;
    gate_.on_outcome(true);
  }
  cache.touch(s, t);
  if (sl.state == SlotState::Loading && !streamed) {
    waited = true;
    cv_.wait(lk, [&] { return sl.state != SlotState::Loading; });
  }
  if (waited) st.stall_s += now_seconds() - t0;
  T.request_class[s] = RequestClass::Unset;
  if (sl.state == SlotState::Failed) {
    const std::string err = loader_->error(id(T), s);
    if (--sl.pins == 0) free_failed(T, s);
    cv_.notify_all();
    throw Error(err);
  }
  ExpertView v;
  const uint8_t* base = cache.slot_data(s);
  const auto& slices = store_->index(p).layers[layer].slices[expert];
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    const ChunkLoc& c = store_->chunk(layer, expert, proj, p);
    if (c.nbytes == 0) continue;
    const ExpertSlice& m = slices[proj];
    v.proj[proj] =
        matrix_view(base + store_->slot_region(layer, expert, proj, p) + c.inner_offset,
                    cfg_.rewrite.slot_type(m.type, m.rows), m.cols, m.rows, cache.space());
  }
  return v;
}

void CachedExpertProvider::await_matrix(int layer, int expert, int proj, Precision p) {
  MOEFLOW_CHECK(proj >= 0 && proj < kNumExpertProj, "await_matrix: no matrix {}", proj);
  std::unique_lock lk(mu_);
  Tier& T = tier(p);
  const int s = T.cache->find(layer, expert);
  // A host view (hybrid) is served whole by acquire; it holds no slot pin.
  if (!host_leases_.empty() && host_leases_.count(lease_key(p, layer, expert))) return;
  MOEFLOW_CHECK(s >= 0 && T.cache->slot(s).pins > 0,
                "await_matrix: expert {} of layer {} is not acquired", expert, layer);
  const Slot& sl = T.cache->slot(s);
  const auto arrived = [&] {
    return sl.state != SlotState::Loading || loader_->chunk_ready(id(T), s, proj);
  };
  if (!arrived()) {
    const double t0 = now_seconds();
    cv_.wait(lk, arrived);
    ls(layer).stall_s += now_seconds() - t0;
  }
  // A failed read of any of its matrices fails the expert; release() frees the slot.
  if (!loader_->error(id(T), s).empty()) throw Error(loader_->error(id(T), s));
}

bool CachedExpertProvider::host_view(int layer, int expert, ExpertView& out) const {
  if (!cfg_.host_views) return false;
  out = cfg_.host_views->at(layer, expert, Precision::High);
  return true;
}

void CachedExpertProvider::release(int layer, int expert, Precision p) {
  std::lock_guard lk(mu_);
  Tier& T = tier(p);
  const int s = T.cache->find(layer, expert);
  if (!host_leases_.empty()) {
    auto it = host_leases_.find(lease_key(p, layer, expert));
    if (it != host_leases_.end()) {
      if (--it->second == 0) host_leases_.erase(it);
      return;
    }
  }
  MOEFLOW_CHECK(s >= 0 && T.cache->slot(s).pins > 0,
                "release: expert {} of layer {} is not acquired", expert, layer);
  if (device_sync_) {
    retired_.emplace_back(p, s);
    return;
  }
  Slot& sl = T.cache->slot(s);
  --sl.pins;
  // A streamed acquire's failed read surfaces in await_matrix, and its slot goes back here.
  if (sl.pins == 0 && sl.state == SlotState::Failed) free_failed(T, s);
  free_transient_if_done(T, s);
  start_streams_ahead();
  cv_.notify_all();
}

void CachedExpertProvider::prefetch(int layer, std::span<const int> experts, float confidence,
                                    Precision p) {
  if (!cfg_.prefetch) return;
  std::lock_guard lk(mu_);
  if (p == Precision::Low && !low_) return;
  Tier& T = tier(p);
  // One verdict for the call: every expert of it targets the same layer with the same slot size.
  const bool too_late = cfg_.skip_late_prefetch && !arrival_.in_time(layer, T.cache->slot_bytes());
  for (int e : experts) {
    if (e < 0 || e >= store_->n_experts(layer)) continue;
    if (T.cache->find(layer, e) >= 0) continue;
    if (too_late) {
      ++ls(layer).prefetch_too_late;
      continue;
    }
    if (cfg_.prefetch_gate && !gate_.admit()) {
      ++ls(layer).prefetch_gated;
      continue;
    }
    Binding b;
    const size_t E = static_cast<size_t>(store_->max_experts());
    const auto expected = [&](ExpertKey c) {
      const size_t i = static_cast<size_t>(c.layer) * E + c.expert;
      return T.expected_cur[i] || T.expected_next[i];
    };
    if (!T.cache->bind_speculative(layer, e, now(route_layer_), b, expected)) {
      ++ls(layer).prefetch_dropped;
      continue;
    }
    note_eviction(b.evicted, b.evicted_unused);
    take_prefetch_victim(T, ExpertKey{layer, e});  // back by a prefetch: no miss to blame
    note_prefetch_victim(T, b.evicted);
    reset_slot(T, b.slot);
    T.cache->slot(b.slot).prefetched = true;
    ++ls(layer).prefetch_issued;
    schedule(T, b.slot, Priority::Low, confidence);
  }
}

void CachedExpertProvider::expect(int layer, std::span<const int> experts, Precision p) {
  std::lock_guard lk(mu_);
  if (p == Precision::Low && !low_) return;
  Tier& T = tier(p);
  if (layer < 0 || layer >= store_->n_layers()) return;
  const size_t E = static_cast<size_t>(store_->max_experts());
  std::vector<uint8_t>& v = layer > route_layer_ ? T.expected_cur : T.expected_next;
  for (int e : experts)
    if (e >= 0 && static_cast<size_t>(e) < E) v[static_cast<size_t>(layer) * E + e] = 1;
}

void CachedExpertProvider::attach_backend(Backend& backend) {
  std::lock_guard lk(mu_);
  if (backend.space() == MemSpace::Host) {
    device_sync_ = nullptr;
    return;
  }
  device_sync_ = [&backend] { backend.synchronize(); };
}

uint64_t CachedExpertProvider::bytes_before_ready(const Tier& T, int s) const {
  return (s < 0 ? T.cache->slot_bytes() : 0) + loader_->bytes_ahead(id(T), s);
}

void CachedExpertProvider::settle_retired() {
  if (retired_.empty()) return;
  device_sync_();
  for (auto [p, s] : retired_) {
    Tier& T = tier(p);
    --T.cache->slot(s).pins;
    free_transient_if_done(T, s);
  }
  retired_.clear();
  start_streams_ahead();
  cv_.notify_all();
}

void CachedExpertProvider::begin_sequence() {
  std::lock_guard lk(mu_);
  settle_retired();
  // A prefill that no single-token step followed still ends here, before the next sequence.
  if (prefill_open_ && seq_steps_ > 0) prefill_done();
  for (Tier* T : {&high_, low_.get()}) {  // a new sequence: no prediction stands
    if (!T) continue;
    std::fill(T->expected_cur.begin(), T->expected_cur.end(), 0);
    std::fill(T->expected_next.begin(), T->expected_next.end(), 0);
  }
  for (Tier* T : {&high_, low_.get()})
    if (T) T->cache->policy().on_sequence_start();
  seq_steps_ = 0;
  prefill_open_ = true;
  std::fill(prefill_counts_.begin(), prefill_counts_.end(), 0.0);
}

void CachedExpertProvider::on_tokens_routed(int layer, int n_tokens, int /*top_k*/,
                                            std::span<const int32_t> experts,
                                            std::span<const float> weights) {
  std::lock_guard lk(mu_);
  // The prefill is the sequence's leading multi-token steps. The first routed layer of a
  // single-token step ends it, and the placement the policy asks for is read before that layer
  // routes; a sequence that starts with a single token has no prefill (as a trace without
  // prompt steps has none in the simulator).
  if (step_tokens_ == 0 && prefill_open_ && n_tokens == 1) {
    if (seq_steps_ > 0) {
      prefill_done();
    } else {
      prefill_open_ = false;
    }
  }
  step_tokens_ = std::max(step_tokens_, n_tokens);
  const int E = store_->max_experts();
  if (prefill_open_ && layer >= 0 && layer < store_->n_layers()) {
    for (const int32_t e : experts)
      if (e >= 0 && e < E) prefill_counts_[static_cast<size_t>(layer) * E + e] += 1;
  }
  if (cfg_.host_views) {  // the hybrid's token counts for this layer's experts
    route_tokens_.assign(E, 0);
    for (const int32_t e : experts)
      if (e >= 0 && e < E) ++route_tokens_[e];
  }
  tok_layer_ = layer;
  tok_experts_.assign(experts.begin(), experts.end());
  if (weights.size() == experts.size()) {
    tok_weights_.assign(weights.begin(), weights.end());
  } else {
    tok_weights_.clear();
  }
}

void CachedExpertProvider::end_step() {
  std::lock_guard lk(mu_);
  const double wall = now_seconds(), busy = loader_->demand_busy_seconds();
  if (step_wall0_ >= 0) gate_.on_step(busy - step_busy0_, wall - step_wall0_);
  step_wall0_ = wall;
  step_busy0_ = busy;
  tokens_ += static_cast<uint64_t>(std::max(1, step_tokens_));
  step_tokens_ = 0;
  tok_layer_ = -1;
  ++seq_steps_;
  deferred_.clear();
  arrival_.on_step_end();
  // The next token's expectations become the coming token's.
  for (Tier* T : {&high_, low_.get()}) {
    if (!T) continue;
    T->expected_cur.swap(T->expected_next);
    std::fill(T->expected_next.begin(), T->expected_next.end(), 0);
  }
  for (Tier* T : {&high_, low_.get()}) {
    if (!T) continue;
    for (int s = 0; s < T->cache->n_slots(); ++s) {
      Slot& sl = T->cache->slot(s);
      sl.wanted = false;
      T->request_class[s] = RequestClass::Unset;
      // Routed but never acquired: a read never issued holds its place for nothing.
      if (sl.state == SlotState::Loading && loader_->unissued(id(*T), s)) {
        reset_slot(*T, s);
        T->cache->free_slot(s);
      }
      free_transient_if_done(*T, s);
    }
  }
  cv_.notify_all();
}

unsigned CachedExpertProvider::ready_chunks(int layer, int expert, Precision p) const {
  std::lock_guard lk(mu_);
  const Tier& T = tier(p);
  const int s = T.cache->find(layer, expert);
  if (s < 0) return 0;
  unsigned m = 0;
  for (int proj = 0; proj < kNumExpertProj; ++proj) {
    if (loader_->chunk_ready(id(T), s, proj)) m |= 1u << proj;
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
  settle_retired();
  loader_->wait_idle(lk);
}

// ---- SlotLoaderHooks: the loader's workers, under mu_ ----

void CachedExpertProvider::on_slot_done(int tier, int s, bool ok) {
  Tier& T = tier_at(tier);
  Slot& sl = T.cache->slot(s);
  if (ok) {
    sl.state = SlotState::Ready;
    free_transient_if_done(T, s);
  } else {
    sl.state = SlotState::Failed;
    // Nobody waits on a failed prefetch: forget it so the next acquire retries the read
    // and reports the error itself.
    if (sl.pins == 0) free_failed(T, s);
  }
}

bool CachedExpertProvider::may_pause(int tier, int s) {
  const Slot& sl = tier_at(tier).cache->slot(s);
  return !sl.wanted && sl.pins == 0;
}

void CachedExpertProvider::on_read(const Read& r) {
  LayerOffloadStats& st = ls(r.layer);
  st.read_s += r.seconds;
  st.rewrite_s += r.rewrite_s;
  st.bytes_rewritten += r.rewritten_bytes;
  // A rewritten matrix is ready only after its rewrite: the estimate counts that time too.
  arrival_.on_read(r.bytes, r.seconds + r.rewrite_s);
  st.bytes_read += r.bytes;
  if (r.tier == 1) st.bytes_read_low += r.bytes;
  if (r.chunk_done) ++st.chunks_read;
  if (r.paused) ++st.prefetch_paused;
}

}  // namespace moeflow
