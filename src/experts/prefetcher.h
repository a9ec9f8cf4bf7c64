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
  // The copy (file read); may throw moeflow::Error.
  virtual void run(const ChunkTask& t) = 0;
  // Called after run(); `error` is empty on success.
  virtual void finish(const ChunkTask& t, const std::string& error) = 0;
};

class Prefetcher {
 public:
  Prefetcher(ChunkSink& sink, int n_threads);
  ~Prefetcher();  // stops workers after their current task; queued tasks are dropped
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void push(ChunkTask t, Priority p);
  // Physically removes queued LOW tasks matching `pred` (evaluated under the queue lock; must
  // not call back into the prefetcher). Returns how many were removed.
  size_t drop_low_if(const std::function<bool(const ChunkTask&)>& pred);
  size_t queued(Priority p) const;
  int n_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void worker();
  bool pop(ChunkTask& out);  // under mu_

  ChunkSink& sink_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChunkTask> high_;
  std::vector<ChunkTask> low_;  // binary heap: highest confidence, then lowest seq, on top
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace moeflow
