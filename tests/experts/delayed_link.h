#pragma once
// A "device" link for tests without a GPU: device memory is host memory tagged PinnedHost
// (stand_in_device.h), and every copy lands later, on a thread of the lane's own, so a transfer
// that reuses a staging buffer too early or calls a chunk ready before its copy landed reads
// wrong bytes. Pinning succeeds unless refuse_pin is set.
// Not the production stand-in link (make_standin_device_link): the tests set refuse_pin (a
// locked-memory limit; that link refuses only overlapping ranges), count lanes opened (which
// StandInCounts does not) and allocate device memory from stand_in_device.h's TaggedAllocator.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend/device_link.h"
#include "support/stand_in_device.h"

namespace moeflow::test {

class DelayedLane final : public CopyLane {
 public:
  DelayedLane() : worker_([this] { run(); }) {}
  ~DelayedLane() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  uint64_t copy_async(void* dst, const void* src, size_t n) override {
    std::lock_guard lk(mu_);
    jobs_.push_back({dst, src, n, ++issued_});
    cv_.notify_all();
    return issued_;
  }
  void wait(uint64_t t) override {
    std::unique_lock lk(mu_);
    EXPECT_LE(t, issued_);
    cv_.wait(lk, [&] { return done_ >= t; });
  }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t n;
    uint64_t ticket;
  };
  void run() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      const Job j = jobs_.front();
      jobs_.pop_front();
      lk.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // the bus is slow
      std::memcpy(j.dst, j.src, j.n);
      lk.lock();
      done_ = j.ticket;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  uint64_t issued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

class DelayedLink final : public DeviceLink {
 public:
  std::string name() const override { return "delayed"; }
  Allocator& device_allocator() override { return device_; }
  Allocator& pinned_allocator() override { return HostAllocator::instance(); }
  std::unique_ptr<CopyLane> open_lane() override {
    ++lanes_opened;
    return std::make_unique<DelayedLane>();
  }
  std::unique_ptr<PinnedRange> pin(const void*, size_t n, std::string& why) override {
    if (refuse_pin) {
      why = "locked-memory limit of the test";
      return nullptr;
    }
    pinned += n;
    return std::make_unique<PinnedRange>();
  }
  void memory_info(uint64_t& f, uint64_t& t) override { f = t = 0; }

  bool refuse_pin = false;
  std::atomic<int> lanes_opened{0};
  uint64_t pinned = 0;
  TaggedAllocator device_;
};

}  // namespace moeflow::test
