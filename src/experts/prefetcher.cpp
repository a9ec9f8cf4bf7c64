#include "experts/prefetcher.h"

#include <algorithm>
#include <exception>

#include "core/error.h"

namespace moeflow {

namespace {
// std heap keeps the "largest" on top: larger confidence first, then earlier seq.
bool low_less(const ChunkTask& a, const ChunkTask& b) {
  if (a.confidence != b.confidence) return a.confidence < b.confidence;
  return a.seq > b.seq;
}
}  // namespace

Prefetcher::Prefetcher(ChunkSink& sink, int n_threads) : sink_(sink) {
  MOEFLOW_CHECK(n_threads >= 1 && n_threads <= 64,
                "--io-threads must be between 1 and 64 (got {})", n_threads);
  threads_.reserve(n_threads);
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { worker(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Prefetcher::push(ChunkTask t, Priority p) {
  {
    std::lock_guard lk(mu_);
    t.seq = seq_++;
    if (p == Priority::High) {
      high_.push_back(t);
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

bool Prefetcher::pop(ChunkTask& out) {
  if (!high_.empty()) {
    out = high_.front();
    high_.pop_front();
    return true;
  }
  if (!low_.empty()) {
    std::pop_heap(low_.begin(), low_.end(), low_less);
    out = low_.back();
    low_.pop_back();
    return true;
  }
  return false;
}

void Prefetcher::worker() {
  for (;;) {
    ChunkTask t;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !high_.empty() || !low_.empty(); });
      if (stop_) return;
      pop(t);
    }
    // The sink is called without mu_ held: it takes its own lock, and the cache side calls
    // push()/drop_low_if() while holding that lock (lock order: sink -> queue).
    if (!sink_.begin(t)) continue;
    std::string error;
    try {
      sink_.run(t);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "unknown I/O error";
    }
    sink_.finish(t, error);
  }
}

}  // namespace moeflow
