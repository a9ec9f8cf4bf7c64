#pragma once
// A stand-in for a CUDA stream (internal to backend/standin): work runs later, in the order it
// was enqueued, on a thread of its own. A failure inside a piece of work is kept and thrown by
// the next drain(), and every later piece is dropped until then, as a CUDA error is sticky
// until it is read.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace moeflow::standin {

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(std::function<void()> work);
  // Waits until everything enqueued so far has run; rethrows the first failure since the last
  // drain.
  void drain();
  // Waits until every stream of the process is idle, without reporting failures: what
  // cudaFree / cudaFreeHost do before they free memory that queued work may still use.
  static void wait_all_idle();

 private:
  void loop();
  void wait_idle();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace moeflow::standin
