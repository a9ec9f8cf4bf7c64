// The stand-in device's bus: copy lanes that complete late on threads of their own, and
// page-locking with cudaHostRegister's refusal of a range that is locked already.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "backend/standin/standin_device.h"
#include "backend/standin/standin_memory.h"
#include "core/error.h"

namespace moeflow {
namespace standin {
namespace {

// Copies in issue order on a thread of the lane's own: the issuer gets its ticket back before
// the bytes move, as from cudaMemcpyAsync on a stream.
class StandInLane final : public CopyLane {
 public:
  StandInLane() : thread_([this] { loop(); }) {}
  ~StandInLane() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // finishes the queue first: nothing copies out of freed staging later
  }

  uint64_t copy_async(void* dst, const void* src, size_t n) override {
    if (!MemoryMap::instance().holds(MemSpace::Device, dst, n))
      fail("stand-in device: a copy of {} bytes to {} does not land inside live device memory", n,
           dst);
    if (MemoryMap::instance().holds(MemSpace::Device, src, n))
      fail("stand-in device: a copy lane copies host -> device; its source is device memory");
    count(&StandInCounts::lane_copies);
    count(&StandInCounts::lane_bytes, n);
    std::lock_guard lk(mu_);
    queue_.push_back({dst, src, n});
    const uint64_t t = ++issued_;
    cv_.notify_all();
    return t;
  }

  void wait(uint64_t ticket) override {
    std::unique_lock lk(mu_);
    MOEFLOW_CHECK(ticket <= issued_, "copy lane: ticket {} was never issued (last {})", ticket,
                  issued_);
    cv_.wait(lk, [&] { return done_ >= ticket; });
  }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t n;
  };
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const Job j = queue_.front();
      queue_.pop_front();
      lk.unlock();
      std::memcpy(j.dst, j.src, j.n);
      lk.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  uint64_t issued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class Locked final : public PinnedRange {
 public:
  explicit Locked(const void* p) : p_(p) {}
  ~Locked() override { MemoryMap::instance().remove(p_); }

 private:
  const void* p_;
};

class StandInLink final : public DeviceLink {
 public:
  std::string name() const override { return "stand-in device"; }
  Allocator& device_allocator() override { return DeviceAllocator::instance(); }
  Allocator& pinned_allocator() override { return PinnedAllocator::instance(); }
  std::unique_ptr<CopyLane> open_lane() override { return std::make_unique<StandInLane>(); }
  std::unique_ptr<PinnedRange> pin(const void* p, size_t n, std::string& why) override {
    MemoryMap& m = MemoryMap::instance();
    if (!p || n == 0) {
      why = "empty range";
      return nullptr;
    }
    // cudaHostRegister refuses a range that overlaps one already registered or pinned
    // (cudaErrorHostMemoryAlreadyRegistered).
    if (m.overlaps_locked(p, n)) {
      count(&StandInCounts::pins_refused);
      why = fmt::format(
          "cudaHostRegister of {:.1f} MiB failed: part of the range is already page-locked",
          double(n) / (1024.0 * 1024.0));
      return nullptr;
    }
    m.add(RangeKind::Locked, p, n);
    count(&StandInCounts::pins);
    return std::make_unique<Locked>(p);
  }
  void memory_info(uint64_t& free_bytes, uint64_t& total_bytes) override {
    const MemoryMap& m = MemoryMap::instance();
    total_bytes = m.total();
    free_bytes = total_bytes - std::min(total_bytes, m.used());
  }
};

}  // namespace
}  // namespace standin

std::unique_ptr<DeviceLink> make_standin_device_link() {
  return std::make_unique<standin::StandInLink>();
}

}  // namespace moeflow
