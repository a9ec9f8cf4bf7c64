#pragma once
// A fixed pool of worker threads for data-parallel kernels. parallel_for splits [0, n) into
// contiguous ranges, one per thread, so results never depend on scheduling: every output
// element is produced by exactly one thread in a fixed order (exact modes stay bit-identical
// across thread counts as long as kernels reduce within one element).
//
// Hand-off: decode issues ~10 small dispatches per layer per token, so the wake-up latency of
// a sleeping worker (30-60 us through a futex on a VM, measured) would cost several percent of
// a token. Workers and the caller therefore spin on an atomic for a short, time-bounded while
// (kSpinMicros) before sleeping on it; a pool that is idle longer costs no CPU. A pool with
// more threads than the CPUs this process may run on never spins: a spinning thread would hold
// the core the thread it waits for needs (measured: 200 us per dispatch instead of 0.4).
//
// One caller at a time: run_on_all / parallel_for must not be entered concurrently.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace moeflow {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, thread_index) over a partition of [0, n) into at most size() ranges,
  // each a multiple of `grain` long (except the last). Returns when all are done.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

  // fn(begin, end, thread_index) over [0, n) in ranges the threads claim as they go, each a
  // multiple of `grain` long (except the last): every thread walks its parallel_for share from
  // the front, and one that is done takes the back half of the next rest it finds. A thread
  // that starts late (the hand-off) or runs slower (a busy sibling, a page fault) computes
  // less, instead of the others waiting for its fixed share, and each thread still reads one
  // sequential stream most of the time. Which thread computes which range depends on timing,
  // so fn's result for a range must not depend on the thread that runs it.
  void parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                            int64_t grain = 1);

  // fn(thread_index) on every thread (including the caller as thread 0).
  void run_on_all(const std::function<void(int)>& fn);

  // How long a thread polls before it sleeps: covers the serial gaps between the dispatches of
  // one token (norms, attention, routing) without burning a core when the pool is idle.
  static constexpr int kSpinMicros = 200;

 private:
  void worker(int index);

  int n_threads_;
  int spin_micros_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;  // published by the release on generation_
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};  // workers blocked (or about to block) in generation_.wait
  std::atomic<bool> stop_{false};
  struct alignas(64) Range {  // parallel_for_dynamic's per-thread rest, one cache line each
    std::atomic<uint64_t> v{0};
  };
  std::unique_ptr<Range[]> ranges_;
};

// CPUs this process may run on (its affinity mask), at least 1.
int default_thread_count();

}  // namespace moeflow
