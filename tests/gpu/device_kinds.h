#pragma once
// The devices the GPU suite runs on: the stand-in device everywhere (backend/standin: the
// CPU's arithmetic behind a GPU's memory rules, so an engine, cache or plumbing defect of the
// device path fails on a machine without a GPU), and CUDA in builds with -DMOEFLOW_CUDA=ON.
// A CUDA case needs a device: without one it is skipped with a reason that starts with
// "no CUDA device:" (scripts/test.sh allows exactly that skip in its CUDA stage), and fails
// instead under MOEFLOW_REQUIRE_GPU=1 (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/backend_choice.h"

namespace moeflow::test {

inline std::vector<BackendKind> device_kinds() {
  std::vector<BackendKind> k{BackendKind::StandIn};
  if (cuda_built_in()) k.push_back(BackendKind::Cuda);
  return k;
}

inline bool gpu_required() {
  const char* e = std::getenv("MOEFLOW_REQUIRE_GPU");
  return e && std::strcmp(e, "1") == 0;
}

}  // namespace moeflow::test

// Skips (or, with MOEFLOW_REQUIRE_GPU=1, fails) a CUDA case on a machine without a device.
#define MOEFLOW_NEED_DEVICE(kind)                                                            \
  do {                                                                                       \
    if ((kind) == ::moeflow::BackendKind::Cuda) {                                            \
      const std::string why_ = ::moeflow::device_unavailable_reason(kind);                   \
      if (!why_.empty()) {                                                                   \
        if (::moeflow::test::gpu_required())                                                 \
          FAIL() << why_ << " (MOEFLOW_REQUIRE_GPU=1: this machine must run the GPU tests)"; \
        GTEST_SKIP() << why_;                                                                \
      }                                                                                      \
    }                                                                                        \
  } while (0)
