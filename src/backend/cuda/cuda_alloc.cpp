#include "backend/cuda/cuda_alloc.h"

#include <cstdio>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/device_rules.h"
#include "core/error.h"

namespace moeflow::cuda {
namespace {

double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

}  // namespace

DeviceAllocator& DeviceAllocator::instance(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<DeviceAllocator>> all;
  std::lock_guard lk(mu);
  auto& a = all[device];
  if (!a) a.reset(new DeviceAllocator(device));
  return *a;
}

std::string DeviceAllocator::name() const { return fmt::format("cuda device {}", device_); }

void DeviceAllocator::add_listener(AllocListener* l) {
  std::lock_guard lk(mu_);
  listeners_.push_back(l);
}

void DeviceAllocator::remove_listener(AllocListener* l) {
  std::lock_guard lk(mu_);
  std::erase(listeners_, l);
}

void DeviceAllocator::notify() {
  std::vector<AllocListener*> ls;
  {
    std::lock_guard lk(mu_);
    ls = listeners_;
  }
  for (AllocListener* l : ls) l->before_device_memory_change();
}

Buffer DeviceAllocator::allocate(size_t bytes, size_t alignment) {
  // cudaMalloc returns 256-byte aligned memory (backend/device_rules.h).
  check_alignment("cuda allocator", alignment, kDeviceMaxAlignment);
  notify();
  MOEFLOW_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory error is not sticky: clear it
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    fail(
        "out of device memory: could not allocate {:.1f} MiB on CUDA device {} ({:.1f} MiB free of "
        "{:.1f} MiB): {}",
        mib(bytes), device_, mib(free_b), mib(total_b), cudaGetErrorString(e));
  }
  return make(static_cast<uint8_t*>(p), bytes);
}

void DeviceAllocator::release(uint8_t* data, size_t) {
  notify();
  // The current device is per thread: a buffer freed on another thread goes to its own device.
  if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
  // cudaFree waits for the work still using the memory. Destructors do not throw: a failure
  // here (a device already in an error state) is reported and the memory left to the driver.
  const cudaError_t e = cudaFree(data);
  if (e != cudaSuccess)
    std::fprintf(stderr, "moeflow: warning: cudaFree failed: %s\n", cudaGetErrorString(e));
}

PinnedHostAllocator& PinnedHostAllocator::instance() {
  static PinnedHostAllocator a;
  return a;
}

Buffer PinnedHostAllocator::allocate(size_t bytes, size_t alignment) {
  check_alignment("pinned allocator", alignment, kPinnedMaxAlignment);
  void* p = nullptr;
  const cudaError_t e =
      cudaHostAlloc(&p, bytes == 0 ? 64 : bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("out of pinned host memory: could not allocate {:.1f} MiB: {}", mib(bytes),
         cudaGetErrorString(e));
  }
  return make(static_cast<uint8_t*>(p), bytes);
}

void PinnedHostAllocator::release(uint8_t* data, size_t) {
  const cudaError_t e = cudaFreeHost(data);
  if (e != cudaSuccess)
    std::fprintf(stderr, "moeflow: warning: cudaFreeHost failed: %s\n", cudaGetErrorString(e));
}

HostRegistration::HostRegistration(const void* p, size_t bytes) {
  if (!p || bytes == 0) {
    reason_ = "empty range";
    return;
  }
  // Model files are mapped read-only: the driver pins such pages only with the read-only flag,
  // which devices report support for.
  int dev = 0, read_only = 0;
  unsigned flags = cudaHostRegisterPortable;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, dev) ==
          cudaSuccess &&
      read_only)
    flags |= cudaHostRegisterReadOnly;
  void* base = const_cast<void*>(p);
  const cudaError_t e = cudaHostRegister(base, bytes, flags);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    reason_ =
        fmt::format("cudaHostRegister of {:.1f} MiB failed: {}", mib(bytes), cudaGetErrorString(e));
    return;
  }
  base_ = base;
  pinned_ = true;
}

HostRegistration::~HostRegistration() {
  if (pinned_ && cudaHostUnregister(base_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace moeflow::cuda
