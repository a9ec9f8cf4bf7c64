// --backend: the names, and the error a machine or build without CUDA gives.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "runtime/backend_choice.h"
#if MOEFLOW_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace moeflow {
namespace {

TEST(BackendChoice, NamesAndUnknownBackend) {
  EXPECT_EQ(parse_backend_kind("cpu"), BackendKind::Cpu);
  EXPECT_EQ(parse_backend_kind("cuda"), BackendKind::Cuda);
  EXPECT_STREQ(backend_kind_name(BackendKind::Cuda), "cuda");
  try {
    parse_backend_kind("gpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: cpu, cuda"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_backend(BackendKind::Cpu, nullptr)->name(), "cpu");
}

TEST(BackendChoice, CudaIsRefusedWithTheReason) {
  std::string why;
#if MOEFLOW_HAVE_CUDA
  ASSERT_TRUE(cuda_built_in());
  if (cuda_device_available()) {
    EXPECT_EQ(make_backend(BackendKind::Cuda, nullptr)->name(), "cuda");
    return;
  }
  why = "no CUDA device";
#else
  ASSERT_FALSE(cuda_built_in());
  why = "built without CUDA";
#endif
  try {
    make_backend(BackendKind::Cuda, nullptr);
    FAIL() << "a CUDA backend without CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow
