#pragma once
// Small helpers shared by the model, runtime, trace and gpu tests: a temp folder per test process,
// the relative max difference of two rows.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <string>

namespace moeflow::test {

// One folder per test process, removed when the process exits (files still mapped stay
// readable after the unlink).
inline std::string temp_path(const std::string& name) {
  struct ProcessTempDir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("moeflow_model_test_" + std::to_string(getpid()));
    ~ProcessTempDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static ProcessTempDir dir;
  std::filesystem::create_directories(dir.path);
  return (dir.path / name).string();
}

// Max |a - b| over a row, relative to the row's largest magnitude (at least 1).
template <typename A, typename B>
double rel_max_diff(const A& a, const B& b, size_t n) {
  double md = 0, scale = 1;
  for (size_t i = 0; i < n; ++i) {
    md = std::max(md, std::fabs((double)a[i] - (double)b[i]));
    scale = std::max(scale, std::fabs((double)b[i]));
  }
  return md / scale;
}

}  // namespace moeflow::test
