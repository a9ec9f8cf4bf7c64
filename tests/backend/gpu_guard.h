#pragma once
// The one way a GPU test may not run: no CUDA device. Such a test is skipped with a message
// that starts with "no CUDA device:" (CI allow-lists exactly that reason on machines without
// a GPU), and fails instead when MOEFLOW_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it, so a
// GPU machine that cannot see its GPU fails loudly rather than skipping everything).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend.h"

namespace moeflow::test {

inline bool gpu_required() {
  const char* e = std::getenv("MOEFLOW_REQUIRE_GPU");
  return e && std::strcmp(e, "1") == 0;
}

}  // namespace moeflow::test

#define MOEFLOW_NEED_CUDA_DEVICE()                                                 \
  do {                                                                             \
    if (!::moeflow::cuda_device_available()) {                                     \
      if (::moeflow::test::gpu_required())                                         \
        FAIL() << "no CUDA device: " << ::moeflow::cuda_unavailable_reason()       \
               << " (MOEFLOW_REQUIRE_GPU=1: this machine must run the GPU tests)"; \
      GTEST_SKIP() << "no CUDA device: " << ::moeflow::cuda_unavailable_reason();  \
    }                                                                              \
  } while (0)
