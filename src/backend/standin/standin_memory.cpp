#include "backend/standin/standin_memory.h"

#include <cstdlib>
#include <cstring>

#include "backend/device_rules.h"
#include "backend/standin/stream.h"
#include "core/error.h"

namespace moeflow::standin {
namespace {

double mib(uint64_t b) { return double(b) / (1024.0 * 1024.0); }

void* aligned(size_t alignment, size_t bytes) {
  const size_t n = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, n);
}

}  // namespace

MemoryMap& MemoryMap::instance() {
  static MemoryMap m;
  return m;
}

void MemoryMap::add(RangeKind k, const void* p, size_t n) {
  std::lock_guard lk(mu_);
  ranges_[static_cast<const uint8_t*>(p)] = {n, k};
}

void MemoryMap::remove(const void* p) {
  std::lock_guard lk(mu_);
  ranges_.erase(static_cast<const uint8_t*>(p));
}

bool MemoryMap::holds(MemSpace s, const void* p, size_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  std::lock_guard lk(mu_);
  auto it = ranges_.upper_bound(b);
  if (it == ranges_.begin()) return false;
  --it;
  const bool kind_ok = s == MemSpace::Device ? it->second.kind == RangeKind::Device
                                             : it->second.kind != RangeKind::Device;
  return kind_ok && b + n <= it->first + it->second.n;
}

bool MemoryMap::overlaps_locked(const void* p, size_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  std::lock_guard lk(mu_);
  auto it = ranges_.lower_bound(b + n);  // first range starting at or after the end
  while (it != ranges_.begin()) {
    --it;
    if (it->first + it->second.n <= b) break;  // ranges do not overlap each other
    if (it->second.kind != RangeKind::Device) return true;
  }
  return false;
}

uint64_t MemoryMap::total() const {
  std::lock_guard lk(mu_);
  return total_;
}

uint64_t MemoryMap::used() const {
  std::lock_guard lk(mu_);
  return used_;
}

void MemoryMap::set_total(uint64_t bytes) {
  std::lock_guard lk(mu_);
  total_ = bytes;
}

bool MemoryMap::reserve(uint64_t n) {
  std::lock_guard lk(mu_);
  if (used_ + n > total_) return false;
  used_ += n;
  return true;
}

void MemoryMap::unreserve(uint64_t n) {
  std::lock_guard lk(mu_);
  used_ -= std::min(used_, n);
}

DeviceAllocator& DeviceAllocator::instance() {
  static DeviceAllocator a;
  return a;
}

Buffer DeviceAllocator::allocate(size_t bytes, size_t alignment) {
  check_alignment("stand-in device allocator", alignment, kDeviceMaxAlignment);
  MemoryMap& m = MemoryMap::instance();
  const size_t n = bytes == 0 ? 256 : bytes;
  if (!m.reserve(n))
    fail(
        "out of device memory: could not allocate {:.1f} MiB on the stand-in device ({:.1f} MiB "
        "free of {:.1f} MiB)",
        mib(n), mib(m.total() - m.used()), mib(m.total()));
  void* p = aligned(kDeviceMaxAlignment, n);
  if (!p) {
    m.unreserve(n);
    fail("stand-in device: host memory for {:.1f} MiB of device memory ran out", mib(n));
  }
  // Fresh device memory holds garbage, not zeros: code that reads before writing is caught.
  std::memset(p, 0xA5, n);
  m.add(RangeKind::Device, p, n);
  return make(static_cast<uint8_t*>(p), bytes);
}

void DeviceAllocator::release(uint8_t* data, size_t size) {
  // cudaFree waits for the work still using the memory: so do the stand-in's streams.
  Stream::wait_all_idle();
  MemoryMap& m = MemoryMap::instance();
  m.remove(data);
  m.unreserve(size == 0 ? 256 : size);
  std::free(data);
}

PinnedAllocator& PinnedAllocator::instance() {
  static PinnedAllocator a;
  return a;
}

Buffer PinnedAllocator::allocate(size_t bytes, size_t alignment) {
  check_alignment("stand-in pinned allocator", alignment, kPinnedMaxAlignment);
  void* p = aligned(kPinnedMaxAlignment, bytes);
  if (!p) fail("out of pinned host memory: could not allocate {:.1f} MiB", mib(bytes));
  MemoryMap::instance().add(RangeKind::Pinned, p, std::max<size_t>(bytes, 1));
  return make(static_cast<uint8_t*>(p), bytes);
}

void PinnedAllocator::release(uint8_t* data, size_t) {
  Stream::wait_all_idle();  // as cudaFreeHost
  MemoryMap::instance().remove(data);
  std::free(data);
}

}  // namespace moeflow::standin

namespace moeflow {

void set_standin_vram(uint64_t bytes) { standin::MemoryMap::instance().set_total(bytes); }
uint64_t standin_vram_total() { return standin::MemoryMap::instance().total(); }
uint64_t standin_vram_used() { return standin::MemoryMap::instance().used(); }

StandInCounts standin_counts() {
  standin::MemoryMap& m = standin::MemoryMap::instance();
  std::lock_guard lk(m.count_mu);
  return m.counts;
}

StandInCounts operator-(const StandInCounts& a, const StandInCounts& b) {
  return {a.ops - b.ops,
          a.syncs - b.syncs,
          a.uploads - b.uploads,
          a.upload_bytes - b.upload_bytes,
          a.lane_copies - b.lane_copies,
          a.lane_bytes - b.lane_bytes,
          a.pins - b.pins,
          a.pins_refused - b.pins_refused};
}

}  // namespace moeflow
