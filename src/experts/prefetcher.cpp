#include "experts/prefetcher.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/timer.h"

namespace moeflow {

namespace {
// std heap keeps the "largest" on top: larger confidence first, then earlier seq.
bool low_less(const ChunkTask& a, const ChunkTask& b) {
  if (a.confidence != b.confidence) return a.confidence < b.confidence;
  return a.seq > b.seq;
}
}  // namespace

Prefetcher::Prefetcher(ChunkSink& sink, int n_threads, bool low_when_idle)
    : sink_(sink), low_when_idle_(low_when_idle) {
  MOEFLOW_CHECK(n_threads >= 1 && n_threads <= 64, "--io-threads must be between 1 and 64 (got {})",
                n_threads);
  threads_.reserve(n_threads);
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { worker(); });
}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Prefetcher::push(ChunkTask t, Priority p) {
  {
    std::lock_guard lk(mu_);
    t.seq = seq_++;
    if (p == Priority::High) {
      high_.push_back(t);
      publish_high();
    } else {
      low_.push_back(t);
      std::push_heap(low_.begin(), low_.end(), low_less);
    }
  }
  cv_.notify_one();
}

size_t Prefetcher::drop_low_if(const std::function<bool(const ChunkTask&)>& pred) {
  std::lock_guard lk(mu_);
  const size_t before = low_.size();
  low_.erase(std::remove_if(low_.begin(), low_.end(), pred), low_.end());
  std::make_heap(low_.begin(), low_.end(), low_less);
  return before - low_.size();
}

size_t Prefetcher::queued(Priority p) const {
  std::lock_guard lk(mu_);
  return p == Priority::High ? high_.size() : low_.size();
}

void Prefetcher::publish_high() {
  n_high_.store(high_.size() + (low_when_idle_ ? high_running_ : 0), std::memory_order_relaxed);
  const bool busy = !high_.empty() || high_running_ > 0;
  if (busy && busy_since_ < 0) busy_since_ = now_seconds();
  if (!busy && busy_since_ >= 0) {
    busy_acc_ += now_seconds() - busy_since_;
    busy_since_ = -1;
  }
}

double Prefetcher::high_busy_seconds() const {
  std::lock_guard lk(mu_);
  return busy_acc_ + (busy_since_ >= 0 ? now_seconds() - busy_since_ : 0.0);
}

bool Prefetcher::can_pop() const {
  return !high_.empty() || (!low_.empty() && (!low_when_idle_ || high_running_ == 0));
}

bool Prefetcher::pop(ChunkTask& out, Priority& prio) {
  if (!high_.empty()) {
    out = high_.front();
    high_.pop_front();
    prio = Priority::High;
    ++high_running_;
    publish_high();
    return true;
  }
  if (!low_.empty() && (!low_when_idle_ || high_running_ == 0)) {
    std::pop_heap(low_.begin(), low_.end(), low_less);
    out = low_.back();
    low_.pop_back();
    prio = Priority::Low;
    return true;
  }
  return false;
}

void Prefetcher::worker() {
  for (;;) {
    ChunkTask t;
    Priority prio = Priority::Low;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || can_pop(); });
      if (stop_) return;
      pop(t, prio);
    }
    run_task(t);
    if (prio == Priority::High) {
      std::lock_guard lk(mu_);
      --high_running_;
      publish_high();
      // Workers held back by low_when_idle may start LOW work now.
      if (high_running_ == 0 && !low_.empty()) cv_.notify_all();
    }
  }
}

void Prefetcher::run_task(const ChunkTask& t) {
  // The sink is called without mu_ held: it takes its own lock, and the cache side calls
  // push()/drop_low_if() while holding that lock (lock order: sink -> queue).
  if (!sink_.begin(t)) return;
  std::string error;
  try {
    if (!sink_.run(t)) return;  // paused and re-queued by the sink
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown I/O error";
  }
  sink_.finish(t, error);
}

}  // namespace moeflow
