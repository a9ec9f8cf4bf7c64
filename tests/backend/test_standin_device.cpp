// The stand-in device's rules (backend/standin/standin_device.h), each as a GPU would enforce
// it: what a kernel cannot read is refused, device memory follows cudaMalloc's rules and runs
// out, ops run later on a stream (a failure surfaces at the next sync), copies on a lane land
// late, and page-locking a range twice is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/standin/standin_device.h"
#include "core/error.h"

namespace moeflow {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StandInDevice, RefusesPageableHostViewsAndViewsOutsideLiveMemory) {
  auto be = make_standin_backend(1);
  EXPECT_EQ(be->space(), MemSpace::Device);
  EXPECT_FALSE(be->can_read(MemSpace::Host));
  Buffer a = be->allocator().allocate(4 * 8 * sizeof(float));
  Buffer b = be->allocator().allocate(4 * 8 * sizeof(float));
  const TensorView dev_a = matrix_view(a.data(), GgmlType::F32, 8, 4, MemSpace::Device);
  const TensorView dev_b = matrix_view(b.data(), GgmlType::F32, 8, 4, MemSpace::Device);
  std::vector<float> host(32, 1.0f);
  const TensorView host_v = f32_view(host.data(), 8, 4);
  EXPECT_NE(error_of([&] { be->add(dev_a, host_v); }).find("pageable host memory"),
            std::string::npos);
  // A view tagged Device that points into host memory, and one past the end of its buffer.
  const TensorView mistagged = f32_view(host.data(), 8, 4, MemSpace::Device);
  EXPECT_NE(
      error_of([&] { be->add(dev_a, mistagged); }).find("does not lie inside live device memory"),
      std::string::npos);
  const TensorView overrun = matrix_view(a.data(), GgmlType::F32, 8, 5, MemSpace::Device);
  EXPECT_NE(error_of([&] { be->add(overrun, dev_b); }).find("does not lie inside"),
            std::string::npos);
  // A freed buffer is not device memory any more.
  b.reset();
  EXPECT_NE(error_of([&] { be->add(dev_a, dev_b); }).find("freed"), std::string::npos);
}

TEST(StandInDevice, AllocatorFollowsCudaMallocsRulesAndRunsOut) {
  auto be = make_standin_backend(1);
  EXPECT_NE(error_of([&] {
              (void)be->allocator().allocate(1024, 4096);
            }).find("alignment 4096 is not a power of two up to 256"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)be->allocator().allocate(1024, 96); }).find("alignment 96"),
            std::string::npos);
  Buffer ok = be->allocator().allocate(1000, 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ok.data()) % 256, 0u);
  const uint64_t total = standin_vram_total();
  set_standin_vram(standin_vram_used() + (1 << 20));
  EXPECT_NE(error_of([&] { (void)be->allocator().allocate(2 << 20); }).find("out of device memory"),
            std::string::npos);
  Buffer fits = be->allocator().allocate(512 << 10);  // what is free still is
  EXPECT_TRUE(fits);
  set_standin_vram(total);
  // The link's pinned memory takes page alignment, not more.
  auto link = make_standin_device_link();
  Buffer pinned = link->pinned_allocator().allocate(8192, 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned.data()) % 4096, 0u);
  EXPECT_THROW((void)link->pinned_allocator().allocate(8192, 8192), Error);
  uint64_t free_b = 0, total_b = 0;
  link->memory_info(free_b, total_b);
  EXPECT_EQ(total_b, total);
  EXPECT_LT(free_b, total_b);
}

TEST(StandInDevice, OpsRunOnAStreamAndResultsReachTheHostThroughSyncs) {
  auto be = make_standin_backend(2);
  Buffer x = be->allocator().allocate(64 * sizeof(float));
  Buffer y = be->allocator().allocate(64 * sizeof(float));
  std::vector<float> hx(64), hy(64);
  for (int i = 0; i < 64; ++i) hx[i] = float(i), hy[i] = float(2 * i);
  const TensorView dx = f32_view(x.as<float>(), 64, 1, MemSpace::Device);
  const TensorView dy = f32_view(y.as<float>(), 64, 1, MemSpace::Device);
  be->copy(dx, f32_view(hx.data(), 64));
  be->copy(dy, f32_view(hy.data(), 64));
  const StandInCounts before = standin_counts();
  for (int r = 0; r < 3; ++r) be->add(dx, dy);  // queued
  std::vector<float> staging;
  const float* got = be->read_f32(dx, staging);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(got[i], float(7 * i));
  const StandInCounts after = standin_counts();
  EXPECT_EQ(after.ops - before.ops, 3u);
  EXPECT_EQ(after.syncs - before.syncs, 1u);
  // A failure inside an op (shapes the kernel refuses) surfaces at the next sync, as a CUDA
  // error does, and the stream works again after it was read.
  Buffer z = be->allocator().allocate(32 * sizeof(float));
  const TensorView dz = f32_view(z.as<float>(), 32, 1, MemSpace::Device);
  EXPECT_NO_THROW(be->copy(dz, dx.slice_rows(0, 1)));  // 64 -> 32 columns: refused on the stream...
  EXPECT_THROW(be->synchronize(), Error);              // ...and reported here
  EXPECT_NO_THROW(be->synchronize());
}

TEST(StandInDevice, LaneCopiesLandLateAndInOrderAndPinningTwiceIsRefused) {
  auto link = make_standin_device_link();
  Buffer dev = link->device_allocator().allocate(1 << 20);
  Buffer src = link->pinned_allocator().allocate(1 << 20);
  std::memset(src.data(), 7, 1 << 20);
  auto lane = link->open_lane();
  uint64_t last = 0;
  for (int i = 0; i < 4; ++i)
    last = lane->copy_async(dev.data() + i * (256 << 10), src.data(), 256 << 10);
  lane->wait(last);
  for (int i = 0; i < (1 << 20); i += 4096) ASSERT_EQ(dev.data()[i], 7);
  EXPECT_THROW(lane->wait(last + 5), Error);  // never issued
  std::vector<uint8_t> host(1 << 16);
  EXPECT_THROW(lane->copy_async(host.data(), src.data(), 16), Error);  // not device memory
  std::string why;
  auto pin = link->pin(host.data(), host.size(), why);
  ASSERT_TRUE(pin) << why;
  auto again = link->pin(host.data() + 100, 1000, why);
  EXPECT_FALSE(again);
  EXPECT_NE(why.find("already page-locked"), std::string::npos) << why;
  pin.reset();
  EXPECT_TRUE(link->pin(host.data() + 100, 1000, why)) << why;
}

}  // namespace
}  // namespace moeflow
