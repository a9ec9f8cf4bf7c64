#pragma once
// Prefetcher: I/O worker threads consuming a two-priority queue of chunk tasks (one task per
// expert projection). HIGH tasks (experts the router has chosen) are always taken before LOW
// ones (speculative predictions), so a burst of HIGH work preempts LOW work between chunks.
// LOW tasks are ordered by prediction confidence, then FIFO.
//
// The prefetcher knows nothing about slots or experts' states: a ChunkSink (the cache side)
// validates a task when a worker is about to start it (stale tasks, e.g. cancelled or promoted
// ones, are skipped — lazy deletion keeps cancel/promote O(1) for the caller) and is told when
// it finished. The copy itself is done by the sink's `run`, so a CUDA tier can plug in a
// host->device copy instead of a file read.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace moeflow {

enum class Priority : uint8_t { High = 0, Low = 1 };

struct ChunkTask {
  uint32_t slot = 0;
  uint8_t proj = 0;
  uint64_t ticket = 0;  // must match the sink's current ticket for the chunk, else stale
  int layer = -1;
  int expert = -1;
  float confidence = 1.0f;
  uint64_t seq = 0;  // set by the queue (FIFO tie-break)
  uint8_t tier = 0;  // which of the sink's caches the slot belongs to (0 high, 1 low precision)
};

class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // Called by a worker before running the task; false drops it (stale). Must mark the chunk
  // as in progress so that it is no longer cancellable.
  virtual bool begin(const ChunkTask& t) = 0;
  // The copy (file read); may throw moeflow::Error. Returns false when it stopped part-way to
  // let demand work go first and re-queued the rest itself (then finish() is not called).
  virtual bool run(const ChunkTask& t) = 0;
  // Called after a run() that completed or threw; `error` is empty on success.
  virtual void finish(const ChunkTask& t, const std::string& error) = 0;
};

class Prefetcher {
 public:
  // `low_when_idle`: a worker starts a LOW task only while no HIGH task is queued or running
  // on another worker. Reads share one disk (or link): a speculative read running beside a
  // demand read takes half its bandwidth.
  Prefetcher(ChunkSink& sink, int n_threads, bool low_when_idle = true);
  ~Prefetcher();  // stop()
  // Stops the workers after their current task (queued tasks are dropped) and joins them.
  // Idempotent. The sink calls push() from a worker, so it must stop the workers before the
  // pointer it reaches the prefetcher through goes away.
  void stop();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void push(ChunkTask t, Priority p);
  // Physically removes queued LOW tasks matching `pred` (evaluated under the queue lock; must
  // not call back into the prefetcher). Returns how many were removed.
  size_t drop_low_if(const std::function<bool(const ChunkTask&)>& pred);
  size_t queued(Priority p) const;
  // Seconds during which HIGH work was queued or running, since construction: the share of
  // the disk's (link's) time that speculative reads cannot have.
  double high_busy_seconds() const;
  // Lock-free hint for a speculative copy deciding whether to give way between parts: a HIGH
  // task is queued (or, with low_when_idle, running on another worker).
  bool high_busy() const { return n_high_.load(std::memory_order_relaxed) > 0; }
  int n_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void worker();
  void run_task(const ChunkTask& t);
  bool can_pop() const;                      // under mu_
  bool pop(ChunkTask& out, Priority& prio);  // under mu_
  void publish_high();                       // under mu_

  ChunkSink& sink_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChunkTask> high_;
  int high_running_ = 0;
  double busy_acc_ = 0, busy_since_ = -1;  // -1: no HIGH work now
  bool low_when_idle_ = true;
  // high_.size() (+ high_running_ with low_when_idle), readable without mu_
  std::atomic<size_t> n_high_{0};
  std::vector<ChunkTask> low_;  // binary heap: highest confidence, then lowest seq, on top
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace moeflow
