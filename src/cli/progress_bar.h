#pragma once
// Progress of a job that reports only between coarse steps (gen-model reports after each
// tensor; one expert tensor of a 1 GB model takes 15 s): between reports the bar advances on an
// estimate, the bytes per second measured so far times the time since the last report, capped
// just short of the running step's end, and a clock shows the time spent. Redrawn in place on a
// terminal; on a pipe (CI logs), one line per 10% of real progress.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace moeflow::cli {

class ProgressBar {
 public:
  // steps: the byte size of each step, in the order they complete; initial_rate: bytes per
  // second to assume until the first step has finished (0: none, the bar waits for it).
  ProgressBar(bool enabled, std::vector<uint64_t> steps, double initial_rate = 0);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Called by the job: `done` of `total` bytes are finished.
  void update(uint64_t done, uint64_t total);

 private:
  void tick();
  void draw(uint64_t shown, uint64_t total, double elapsed);

  bool enabled_, tty_;
  std::vector<uint64_t> ends_;  // cumulative step ends
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t done_ = 0, total_ = 0;
  double start_ = 0, last_report_ = 0, initial_rate_ = 0;
  int last_decile_ = -1;
  std::thread ticker_;
};

}  // namespace moeflow::cli
