#include "cli/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "core/timer.h"

namespace moeflow::cli {

ProgressBar::ProgressBar(bool enabled, std::vector<uint64_t> steps, double initial_rate)
    : enabled_(enabled),
      tty_(isatty(fileno(stderr))),
      start_(now_seconds()),
      initial_rate_(initial_rate) {
  uint64_t sum = 0;
  for (uint64_t s : steps) ends_.push_back(sum += s);
  last_report_ = start_;
  if (enabled_ && tty_) ticker_ = std::thread([this] { tick(); });
}

ProgressBar::~ProgressBar() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_ || total == 0) return;
  std::lock_guard lk(mu_);
  done_ = done;
  total_ = total;
  last_report_ = now_seconds();
  if (tty_) {
    draw(done, total, last_report_ - start_);
    if (done == total) std::fprintf(stderr, "\n");
  } else if (total >= (256ull << 20)) {  // small files: no log noise
    const int decile = (int)(10.0 * (double)done / (double)total);
    if (decile > last_decile_) {
      last_decile_ = decile;
      std::fprintf(stderr, "gen-model: %d%% (%.2f / %.2f GB)\n", decile * 10, done / 1e9,
                   total / 1e9);
    }
  }
  std::fflush(stderr);
}

void ProgressBar::tick() {
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stop_; })) {
    if (total_ == 0 || done_ >= total_) continue;
    const double now = now_seconds();
    // The step now running ends at the first cumulative end past what is done.
    auto next = std::upper_bound(ends_.begin(), ends_.end(), done_);
    const uint64_t step_end = next == ends_.end() ? total_ : std::min(*next, total_);
    uint64_t shown = done_;
    const double measured = last_report_ - start_;
    const double rate = done_ > 0 && measured > 0 ? (double)done_ / measured : initial_rate_;
    if (rate > 0) {
      const double guess = (double)done_ + rate * (now - last_report_);
      // Never past the step's end: the report that it finished does that.
      const double cap = (double)done_ + 0.99 * (double)(step_end - done_);
      shown = (uint64_t)std::min(guess, cap);
    }
    draw(shown, total_, now - start_);
    std::fflush(stderr);
  }
}

void ProgressBar::draw(uint64_t shown, uint64_t total, double elapsed) {
  const double frac = (double)shown / (double)total;
  const int width = 40, fill = std::min(width, (int)(frac * width));
  std::fprintf(stderr, "\r[%s%s] %5.1f%%  %.2f / %.2f GB  %.0f s ",
               std::string((size_t)fill, '#').c_str(),
               std::string((size_t)(width - fill), ' ').c_str(), 100.0 * frac, shown / 1e9,
               total / 1e9, elapsed);
}

}  // namespace moeflow::cli
