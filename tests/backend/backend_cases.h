#pragma once
// The backends tests/backend runs every op on: the CPU backend at each SIMD level this machine
// has, and any device backend built in whose device is present. Inputs travel through the
// backend's own allocator and copy, so the tests are the same for every backend.
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace moeflow::test {

struct BackendCase {
  std::string name;  // "cpu-avx2", "cuda", ...
  std::string simd;  // SIMD level to force while the case runs ("" for device backends)
  std::function<std::unique_ptr<Backend>()> make;
  // Worst relative error of the backend's float arithmetic against float64 on one op (the
  // matmul's activation quantization is accounted for separately).
  double float_tol = 2e-5;
  // Matmuls over more than this many tokens may round the float activations of F16/BF16
  // weights to the weight's own type (tensor-core GEMMs): relative 2^-11 / 2^-8 per value.
  // 0: never (the CPU).
  int act16_above_tokens = 0;
};

std::vector<BackendCase> backend_cases();
inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

// Forces case.simd for the lifetime of the guard (CPU kernels pick their level per call).
struct CaseGuard {
  explicit CaseGuard(const BackendCase& c);
  ~CaseGuard();
};

// A float32 tensor in a backend's memory, filled from host data.
struct DeviceTensor {
  Buffer buf;
  TensorView view;
};
DeviceTensor upload(Backend& be, const std::vector<float>& host, int64_t cols, int64_t rows);
DeviceTensor upload_bytes(Backend& be, const std::vector<uint8_t>& bytes, GgmlType type,
                          int64_t cols, int64_t rows);
// Poisoned (NaN) output so that an element the op forgets to write fails the comparison.
DeviceTensor poisoned(Backend& be, int64_t cols, int64_t rows);
std::vector<float> download(Backend& be, const TensorView& v);

}  // namespace moeflow::test
