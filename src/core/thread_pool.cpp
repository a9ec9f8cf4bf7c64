#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#ifdef __linux__
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace moeflow {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls pred() for up to `micros`; true if it became true. The clock is read every 64 polls
// only, so the loop stays a few loads and pauses.
template <typename Pred>
bool spin_until(int micros, Pred pred) {
  if (micros <= 0) return pred();
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)),
      spin_micros_(n_threads_ <= default_thread_count() ? kSpinMicros : 0),
      ranges_(std::make_unique<Range[]>(n_threads_)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(spin_micros_, changed)) {
      // Announce the sleep before re-checking inside wait(): the caller bumps generation_
      // before it reads sleepers_, so either it sees us here and notifies, or wait() sees the
      // new generation and returns at once (all seq_cst).
      sleepers_.fetch_add(1);
      while (generation_.load() == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  fn(0);
  if (!spin_until(spin_micros_, [&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) pending_.wait(p);
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t chunks = (n + grain - 1) / grain;
  const int nt = (int)std::min<int64_t>(n_threads_, chunks);
  if (nt <= 1) {
    fn(0, n, 0);
    return;
  }
  const int64_t per = (chunks + nt - 1) / nt;
  run_on_all([&](int t) {
    const int64_t b = std::min(n, t * per * grain);
    const int64_t e = std::min(n, (t + 1) * per * grain);
    if (b < e) fn(b, e, t);
  });
}

namespace {

// A thread's range [begin, end) in grains, packed into one word so that the owner's claims
// from the front and a thief's from the back are single compare-exchanges.
uint64_t pack_range(uint32_t b, uint32_t e) { return (uint64_t)e << 32 | b; }
uint32_t range_begin(uint64_t v) { return (uint32_t)v; }
uint32_t range_end(uint64_t v) { return (uint32_t)(v >> 32); }

}  // namespace

void ThreadPool::parallel_for_dynamic(int64_t n,
                                      const std::function<void(int64_t, int64_t, int)>& fn,
                                      int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  if (n_threads_ == 1 || units <= 1) {
    fn(0, n, 0);
    return;
  }
  if (units > (int64_t)UINT32_MAX) {  // the packed ranges count grains in 32 bits
    parallel_for(n, fn, grain);
    return;
  }
  // Each thread starts on its contiguous share, as parallel_for's, and walks it front to back
  // in steps of ~16 rows (one sequential stream: the prefetchers stay ahead of it). A thread
  // whose share is done takes the back half of what another has left and walks that.
  const int nt = n_threads_;
  const uint32_t step = (uint32_t)std::max<int64_t>(1, 16 / grain);
  for (int t = 0; t < nt; ++t)
    ranges_[t].v.store(pack_range((uint32_t)(units * t / nt), (uint32_t)(units * (t + 1) / nt)),
                       std::memory_order_relaxed);
  run_on_all([&](int t) {
    auto run = [&](uint32_t b, uint32_t e) {
      fn((int64_t)b * grain, std::min(n, (int64_t)e * grain), t);
    };
    for (;;) {
      std::atomic<uint64_t>& mine = ranges_[t].v;
      uint64_t v = mine.load(std::memory_order_acquire);
      while (range_begin(v) < range_end(v)) {
        const uint32_t b = range_begin(v), e = std::min(range_end(v), b + step);
        if (mine.compare_exchange_weak(v, pack_range(e, range_end(v)), std::memory_order_acq_rel)) {
          run(b, e);
          v = mine.load(std::memory_order_acquire);
        }
      }
      // Steal: the back half of the first thread (after this one) with work left.
      bool stole = false;
      for (int k = 1; k < nt && !stole; ++k) {
        std::atomic<uint64_t>& other = ranges_[(t + k) % nt].v;
        uint64_t o = other.load(std::memory_order_acquire);
        while (range_begin(o) < range_end(o)) {
          const uint32_t b = range_begin(o), e = range_end(o), mid = e - (e - b + 1) / 2;
          if (other.compare_exchange_weak(o, pack_range(b, mid), std::memory_order_acq_rel)) {
            mine.store(pack_range(mid, e), std::memory_order_release);
            stole = true;
            break;
          }
        }
      }
      if (!stole) return;
    }
  });
}

int default_thread_count() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : (int)hc;
}

}  // namespace moeflow
