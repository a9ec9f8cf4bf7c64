// CUDA builds: whether the op suite (test_backend_ops.cpp, backend_cases.cpp) runs on the GPU.
// Without a device the CUDA instantiation of every op test is absent; this test is the one that
// says so (skipped: "no CUDA device: ...", or failed under MOEFLOW_REQUIRE_GPU=1).
#if MOEFLOW_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend_cases.h"
#include "core/error.h"
#include "gpu_guard.h"

namespace moeflow::test {
namespace {

TEST(CudaDevice, OpSuiteRunsOnTheGpu) {
  MOEFLOW_NEED_CUDA_DEVICE();
  const auto cases = backend_cases();
  ASSERT_TRUE(std::any_of(cases.begin(), cases.end(), [](const BackendCase& c) {
    return c.name == "cuda";
  })) << "a CUDA device is present but the op suite has no cuda case";
  std::printf("CUDA device: %s\n", cuda_device_description().c_str());
  // A round trip through device memory in every direction the backend copies.
  auto be = make_cuda_backend();
  const std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  DeviceTensor a = upload(*be, x, 3, 2), b = poisoned(*be, 3, 2);
  be->copy(b.view, a.view);
  EXPECT_EQ(download(*be, b.view), x);
  std::vector<float> staging;
  const float* h = be->read_f32(a.view, staging);
  EXPECT_EQ(std::vector<float>(h, h + 6), x);
}

TEST(CudaDevice, WithoutADeviceTheReasonIsGivenAndTheFactoryThrows) {
  if (cuda_device_available()) {
    EXPECT_EQ(cuda_unavailable_reason(), "");
    EXPECT_EQ(make_cuda_backend()->name(), "cuda");
    return;
  }
  EXPECT_NE(cuda_unavailable_reason(), "");
  try {
    make_cuda_backend();
    FAIL() << "make_cuda_backend succeeded without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow::test
#endif
