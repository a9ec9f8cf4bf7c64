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
      spin_micros_(n_threads_ <= default_thread_count() ? kSpinMicros : 0) {
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

void ThreadPool::parallel_for_dynamic(int64_t n,
                                      const std::function<void(int64_t, int64_t, int)>& fn,
                                      int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  // Its own cache line: the claims are the only writes the threads share.
  alignas(64) std::atomic<int64_t> next{0};
  const int64_t spread = 2 * (int64_t)n_threads_;
  run_on_all([&](int t) {
    int64_t b = next.load(std::memory_order_relaxed);
    for (;;) {
      if (b >= n) return;
      const int64_t left = (n - b + grain - 1) / grain;
      const int64_t e = std::min(n, b + std::max<int64_t>(1, left / spread) * grain);
      if (next.compare_exchange_weak(b, e, std::memory_order_relaxed)) {
        fn(b, e, t);
        b = next.load(std::memory_order_relaxed);
      }
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
