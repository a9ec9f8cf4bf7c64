#pragma once
// A fixed pool of worker threads for data-parallel kernels. parallel_for splits [0, n) into
// contiguous ranges, one per thread, so results never depend on scheduling: every output
// element is produced by exactly one thread in a fixed order (exact modes stay bit-identical
// across thread counts as long as kernels reduce within one element).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  // fn(thread_index) on every thread (including the caller as thread 0).
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

int default_thread_count();

}  // namespace moeflow
