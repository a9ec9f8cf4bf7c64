#pragma once
// Memory that someone else decides where to put: the expert cache's slot arena, activations and
// KV caches ask an Allocator, so the same code runs over host RAM today and over pinned host
// memory or VRAM when a device backend supplies the allocator.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/tensor.h"

namespace moeflow {

class Allocator;

// Memory from an Allocator, returned to it on destruction. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(uint8_t* data, size_t size, MemSpace space, Allocator* owner)
      : data_(data), size_(size), space_(space), owner_(owner) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  MemSpace space() const { return space_; }
  explicit operator bool() const { return data_ != nullptr; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  MemSpace space_ = MemSpace::Host;
  Allocator* owner_ = nullptr;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual MemSpace space() const = 0;
  virtual std::string name() const = 0;
  // At least `bytes` bytes aligned to `alignment` (a power of two). Throws moeflow::Error
  // naming the size and what ran out when the memory cannot be had.
  virtual Buffer allocate(size_t bytes, size_t alignment = 64) = 0;

 protected:
  friend class Buffer;
  virtual void release(uint8_t* data, size_t size) = 0;
  Buffer make(uint8_t* data, size_t size) { return Buffer(data, size, space(), this); }
};

// Pageable host memory (aligned_alloc). Stateless: one instance serves everyone.
class HostAllocator final : public Allocator {
 public:
  MemSpace space() const override { return MemSpace::Host; }
  std::string name() const override { return "host"; }
  Buffer allocate(size_t bytes, size_t alignment = 64) override;
  static HostAllocator& instance();

 protected:
  void release(uint8_t* data, size_t size) override;
};

}  // namespace moeflow
