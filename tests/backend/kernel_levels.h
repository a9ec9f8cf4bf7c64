#pragma once
// Shared by the CPU kernel tests: the SIMD levels this CPU has, a guard that forces one for a
// scope, and random activations.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace moeflow::test {

// Two floats are the same IEEE bits (a product must equal another kernel's exactly).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// "scalar", then "avx2" and "avx512" where the CPU (and MOEFLOW_SIMD) allows them.
inline std::vector<std::string> levels() {
  std::vector<std::string> out;
  for (const char* l : {"scalar", "avx2", "avx512"}) {
    try {
      force_simd_level(l);
      out.push_back(l);
    } catch (const Error&) {}
  }
  force_simd_level(nullptr);
  return out;
}

struct LevelGuard {
  explicit LevelGuard(const std::string& l) { force_simd_level(l.c_str()); }
  ~LevelGuard() { force_simd_level(nullptr); }
  LevelGuard(const LevelGuard&) = delete;
  LevelGuard& operator=(const LevelGuard&) = delete;
};

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

}  // namespace moeflow::test
