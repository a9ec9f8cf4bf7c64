#pragma once
// The bus between host memory and a device backend's memory, as the expert cache sees it: where
// device slots and pinned staging come from, copy queues of their own beside the backend's
// compute queue, and page-locking of memory the process already has (the mapped model file).
// backend/cuda implements it over CUDA streams and events; the stand-in device
// (backend/standin/standin_device.h: make_standin_device_link) implements the same protocol
// with a GPU's rules over host memory, so the cache's device path runs (and is tested) on
// machines without a GPU.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/allocator.h"

namespace moeflow {

// One queue of host -> device copies. Copies on a lane complete in the order they were issued;
// lanes run independently of each other and of the backend's compute. A lane is used by one
// thread at a time.
class CopyLane {
 public:
  virtual ~CopyLane() = default;
  // Enqueues a copy of n bytes from host memory `src` to `dst` (the link's device memory).
  // `src` must stay unchanged until wait() on the returned ticket returns. Throws
  // moeflow::Error naming the failure.
  virtual uint64_t copy_async(void* dst, const void* src, size_t n) = 0;
  // Blocks until the copy with this ticket and every earlier one on the lane have landed.
  virtual void wait(uint64_t ticket) = 0;
};

// Keeps a range page-locked while it lives.
class PinnedRange {
 public:
  virtual ~PinnedRange() = default;
};

class DeviceLink {
 public:
  virtual ~DeviceLink() = default;
  // "cuda:0 (NVIDIA H100 ...)", "stand-in device"
  virtual std::string name() const = 0;
  // Device memory (the cache's slots) and pinned host memory (staging buffers).
  virtual Allocator& device_allocator() = 0;
  virtual Allocator& pinned_allocator() = 0;
  virtual std::unique_ptr<CopyLane> open_lane() = 0;
  // Page-locks [p, p + n) so that copies from it run as DMA at full bus speed. The driver may
  // refuse (locked-memory limits, more than the machine can lock): then null, with `why` set.
  virtual std::unique_ptr<PinnedRange> pin(const void* p, size_t n, std::string& why) = 0;
  // Free and total bytes of device memory now (0, 0 where it is not known).
  virtual void memory_info(uint64_t& free_bytes, uint64_t& total_bytes) = 0;
};

// Host -> device bandwidth from pinned memory, bytes per second: the median of `reps` copies
// of `bytes` on one lane (what the copy tiers are measured against). Throws when the memory
// cannot be had.
double measure_pinned_h2d(DeviceLink& link, uint64_t bytes = 256ull << 20, int reps = 5);

}  // namespace moeflow
