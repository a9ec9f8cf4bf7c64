#pragma once
// Heap buffer with a chosen alignment (4 KiB for O_DIRECT, 64 B for SIMD). Owns its memory.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

namespace moeflow {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(size_t bytes, size_t alignment = 64) { allocate(bytes, alignment); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void allocate(size_t bytes, size_t alignment = 64) {
    std::free(data_);
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    data_ =
        static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded));
    if (!data_) throw std::bad_alloc();
    size_ = bytes;
  }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moeflow
