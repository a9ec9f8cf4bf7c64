#include <cstring>

#include "backend/device_link.h"

namespace moeflow {
namespace {

class MemcpyLane final : public CopyLane {
 public:
  uint64_t copy_async(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return ++issued_;
  }
  void wait(uint64_t) override {}

 private:
  uint64_t issued_ = 0;
};

class NoPin final : public PinnedRange {};

class HostLoopbackLink final : public DeviceLink {
 public:
  std::string name() const override { return "host loopback"; }
  Allocator& device_allocator() override { return HostAllocator::instance(); }
  Allocator& pinned_allocator() override { return HostAllocator::instance(); }
  std::unique_ptr<CopyLane> open_lane() override { return std::make_unique<MemcpyLane>(); }
  std::unique_ptr<PinnedRange> pin(const void*, size_t, std::string&) override {
    return std::make_unique<NoPin>();
  }
  void memory_info(uint64_t& free_bytes, uint64_t& total_bytes) override {
    free_bytes = total_bytes = 0;
  }
};

}  // namespace

std::unique_ptr<DeviceLink> make_host_loopback_link() { return std::make_unique<HostLoopbackLink>(); }

}  // namespace moeflow
