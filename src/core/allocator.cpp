#include "core/allocator.h"

#include <cstdlib>

#include "core/error.h"

namespace moeflow {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    space_ = o.space_;
    owner_ = std::exchange(o.owner_, nullptr);
  }
  return *this;
}

void Buffer::reset() {
  if (data_ && owner_) owner_->release(data_, size_);
  data_ = nullptr;
  size_ = 0;
  owner_ = nullptr;
}

Buffer HostAllocator::allocate(size_t bytes, size_t alignment) {
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (!p)
    fail("out of host memory: could not allocate {:.1f} MiB", double(bytes) / (1024.0 * 1024.0));
  return make(static_cast<uint8_t*>(p), bytes);
}

void HostAllocator::release(uint8_t* data, size_t) { std::free(data); }

HostAllocator& HostAllocator::instance() {
  static HostAllocator a;
  return a;
}

}  // namespace moeflow
