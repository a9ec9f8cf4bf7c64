#pragma once
// Device memory (cudaMalloc) and pinned host memory (cudaHostAlloc) behind core/allocator.h,
// and page-locking of memory someone else owns (cudaHostRegister of an mmap'ed range).
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "backend/device_link.h"
#include "core/allocator.h"

namespace moeflow::cuda {

// Told before device memory is allocated or freed: a backend ends its stream capture there, so
// that no captured graph refers to memory freed under it and no allocation runs inside a capture.
class AllocListener {
 public:
  virtual ~AllocListener() = default;
  virtual void before_device_memory_change() = 0;
};

// VRAM of one device. One instance per device for the process (Buffers outlive any backend).
class DeviceAllocator final : public Allocator {
 public:
  static DeviceAllocator& instance(int device);
  MemSpace space() const override { return MemSpace::Device; }
  std::string name() const override;
  // Throws moeflow::Error with the size asked for and the free / total VRAM when it fails.
  Buffer allocate(size_t bytes, size_t alignment = 256) override;
  void add_listener(AllocListener* l);
  void remove_listener(AllocListener* l);
  int device() const { return device_; }

 protected:
  void release(uint8_t* data, size_t size) override;

 private:
  explicit DeviceAllocator(int device) : device_(device) {}
  void notify();
  int device_;
  std::mutex mu_;
  std::vector<AllocListener*> listeners_;
};

// Page-locked host memory, mapped into the device's address space (kernels may read it over
// the bus; copies from it are DMA, asynchronous).
class PinnedHostAllocator final : public Allocator {
 public:
  static PinnedHostAllocator& instance();
  MemSpace space() const override { return MemSpace::PinnedHost; }
  std::string name() const override { return "cuda pinned host"; }
  Buffer allocate(size_t bytes, size_t alignment = 64) override;

 protected:
  void release(uint8_t* data, size_t size) override;
};

// Page-locks [p, p + bytes) of memory allocated elsewhere (an mmap'ed model file) for the
// lifetime of the object, so copies from it run at full bus speed. The driver may refuse
// (locked-memory limits, a mapping it cannot pin, a range larger than RAM): then pinned() is
// false, reason() says why, and the caller copies through a pinned staging buffer instead.
class HostRegistration final : public moeflow::PinnedRange {
 public:
  HostRegistration(const void* p, size_t bytes);
  ~HostRegistration() override;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  bool pinned() const { return pinned_; }
  const std::string& reason() const { return reason_; }

 private:
  void* base_ = nullptr;
  bool pinned_ = false;
  std::string reason_;
};

}  // namespace moeflow::cuda
