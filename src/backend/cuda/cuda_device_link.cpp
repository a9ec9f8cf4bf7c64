// DeviceLink over CUDA: one non-blocking stream per lane (copies go to the copy engines beside
// the backend's compute stream), a small ring of events for the lane's tickets.
#include <array>
#include <cstdio>

#include <fmt/format.h>

#include "backend/cuda/cuda_alloc.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace moeflow {
namespace {

class CudaCopyLane final : public CopyLane {
 public:
  explicit CudaCopyLane(int device) : device_(device) {
    MOEFLOW_CUDA_CHECK(cudaSetDevice(device_));
    MOEFLOW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : events_)
      MOEFLOW_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~CudaCopyLane() override {
    // Nothing may still be copying out of a staging buffer that is about to be freed.
    if (stream_ && cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
    for (cudaEvent_t e : events_)
      if (e) (void)cudaEventDestroy(e);
    if (stream_) (void)cudaStreamDestroy(stream_);
  }

  uint64_t copy_async(void* dst, const void* src, size_t n) override {
    MOEFLOW_CUDA_CHECK(cudaSetDevice(device_));  // the current device is per thread
    const uint64_t t = issued_ + 1;
    // The ring slot still tracks ticket t - kRing: that copy must be known done first.
    if (t > kRing) wait(t - kRing);
    MOEFLOW_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
    MOEFLOW_CUDA_CHECK(cudaEventRecord(events_[t % kRing], stream_));
    issued_ = t;
    return t;
  }

  void wait(uint64_t ticket) override {
    if (ticket <= done_) return;
    MOEFLOW_CHECK(ticket <= issued_, "copy lane: ticket {} was never issued (last {})", ticket,
                  issued_);
    MOEFLOW_CUDA_CHECK(cudaEventSynchronize(events_[ticket % kRing]));
    done_ = ticket;  // copies on one stream complete in order
  }

 private:
  static constexpr uint64_t kRing = 8;
  int device_;
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, kRing> events_{};
  uint64_t issued_ = 0, done_ = 0;
};

class CudaDeviceLink final : public DeviceLink {
 public:
  explicit CudaDeviceLink(int device)
      : device_(device), alloc_(cuda::DeviceAllocator::instance(device)) {
    MOEFLOW_CUDA_CHECK(cudaSetDevice(device_));
  }
  std::string name() const override { return fmt::format("cuda:{}", device_); }
  Allocator& device_allocator() override { return alloc_; }
  Allocator& pinned_allocator() override { return cuda::PinnedHostAllocator::instance(); }
  std::unique_ptr<CopyLane> open_lane() override { return std::make_unique<CudaCopyLane>(device_); }
  std::unique_ptr<PinnedRange> pin(const void* p, size_t n, std::string& why) override {
    MOEFLOW_CUDA_CHECK(cudaSetDevice(device_));
    auto r = std::make_unique<cuda::HostRegistration>(p, n);
    if (r->pinned()) return r;
    why = r->reason();
    return nullptr;
  }
  void memory_info(uint64_t& free_bytes, uint64_t& total_bytes) override {
    MOEFLOW_CUDA_CHECK(cudaSetDevice(device_));
    size_t f = 0, t = 0;
    MOEFLOW_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    free_bytes = f;
    total_bytes = t;
  }

 private:
  int device_;
  cuda::DeviceAllocator& alloc_;
};

}  // namespace

std::unique_ptr<DeviceLink> make_cuda_device_link(int device) {
  if (!cuda_device_available()) fail("no CUDA device: {}", cuda_unavailable_reason());
  return std::make_unique<CudaDeviceLink>(device);
}

}  // namespace moeflow
