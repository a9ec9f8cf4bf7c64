#include "backend/standin/stream.h"

#include <set>

namespace moeflow::standin {
namespace {

struct Registry {
  std::mutex mu;
  std::set<Stream*> streams;
};
Registry& registry() {
  static Registry* r = new Registry;  // streams may outlive static destruction order
  return *r;
}

}  // namespace

Stream::Stream() : thread_([this] { loop(); }) {
  std::lock_guard lk(registry().mu);
  registry().streams.insert(this);
}

void Stream::wait_all_idle() {
  std::lock_guard lk(registry().mu);
  for (Stream* s : registry().streams) s->wait_idle();
}

void Stream::wait_idle() {
  if (std::this_thread::get_id() == thread_.get_id()) return;  // freed by the stream's own work
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_ == enqueued_; });
}

Stream::~Stream() {
  {
    std::lock_guard lk(registry().mu);
    registry().streams.erase(this);
  }
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Stream::enqueue(std::function<void()> work) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(work));
    ++enqueued_;
  }
  cv_.notify_all();
}

void Stream::drain() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_ == enqueued_; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void Stream::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = error_ != nullptr;
    lk.unlock();
    std::exception_ptr failed;
    if (!skip) {
      try {
        work();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    work = nullptr;  // captured buffers go before the host hears the work is done
    lk.lock();
    if (failed && !error_) error_ = failed;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace moeflow::standin
