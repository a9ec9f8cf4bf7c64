#pragma once
// The stand-in device's memory (internal to backend/standin): which ranges are device memory,
// pinned host memory or page-locked ranges of someone else's memory, and the allocators that
// hand the first two out under the device's rules.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "backend/standin/standin_device.h"
#include "core/allocator.h"

namespace moeflow::standin {

enum class RangeKind : uint8_t { Device, Pinned, Locked };

class MemoryMap {
 public:
  static MemoryMap& instance();
  void add(RangeKind k, const void* p, size_t n);
  void remove(const void* p);
  // True when [p, p + n) lies inside one live range that a view of space `s` may point into:
  // Device -> device memory; PinnedHost -> pinned or page-locked memory.
  bool holds(MemSpace s, const void* p, size_t n) const;
  // True when [p, p + n) overlaps a page-locked or pinned range.
  bool overlaps_locked(const void* p, size_t n) const;

  uint64_t total() const;
  uint64_t used() const;
  void set_total(uint64_t bytes);
  // Reserves n bytes of VRAM; false when they are not free.
  bool reserve(uint64_t n);
  void unreserve(uint64_t n);

  // Adds n to one of the counters (any thread).
  void count(uint64_t StandInCounts::*field, uint64_t n = 1) {
    std::lock_guard lk(count_mu);
    counts.*field += n;
  }
  StandInCounts counts;  // guarded by count_mu
  std::mutex count_mu;

 private:
  struct Range {
    size_t n;
    RangeKind kind;
  };
  mutable std::mutex mu_;
  std::map<const uint8_t*, Range> ranges_;
  uint64_t total_ = 16ull << 30, used_ = 0;
};

// VRAM: cudaMalloc's rules (256-byte alignment at most), out of memory at the device's size.
class DeviceAllocator final : public Allocator {
 public:
  static DeviceAllocator& instance();
  MemSpace space() const override { return MemSpace::Device; }
  std::string name() const override { return "stand-in device"; }
  Buffer allocate(size_t bytes, size_t alignment = 256) override;

 protected:
  void release(uint8_t* data, size_t size) override;
};

// Pinned host memory: cudaHostAlloc's rules (page alignment at most).
class PinnedAllocator final : public Allocator {
 public:
  static PinnedAllocator& instance();
  MemSpace space() const override { return MemSpace::PinnedHost; }
  std::string name() const override { return "stand-in pinned host"; }
  Buffer allocate(size_t bytes, size_t alignment = 64) override;

 protected:
  void release(uint8_t* data, size_t size) override;
};

// Adds n to one of the process-wide counters (any thread).
inline void count(uint64_t StandInCounts::*field, uint64_t n = 1) {
  MemoryMap::instance().count(field, n);
}

}  // namespace moeflow::standin
