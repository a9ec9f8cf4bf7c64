#include "backend_cases.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "backend/standin/standin_device.h"
#include "core/error.h"
#include "core/thread_pool.h"
#if MOEFLOW_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace moeflow::test {

std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  static ThreadPool pool(3);  // an odd split: every op must not depend on the thread count
  for (const char* level : {"scalar", "avx2", "avx512"}) {
    try {
      force_simd_level(level);
    } catch (const Error&) {
      continue;  // not on this CPU
    }
    out.push_back(
        {std::string("cpu-") + level, level, [] { return std::make_unique<CpuBackend>(&pool); }});
  }
  force_simd_level(nullptr);
  // The stand-in device: the CPU's kernels behind a GPU's rules (device memory only, a stream):
  // every op's plumbing on a device backend, on machines without a GPU.
  out.push_back({"standin", "", [] { return make_standin_backend(3); }});
#if MOEFLOW_HAVE_CUDA
  // Float ops within 2e-5 relative of float64 (CUDA's expf/tanhf/powf/cosf are within 2 ulp
  // and reductions run in float); GEMMs of more than 8 tokens round F16/BF16-weight
  // activations to 16 bits (docs/gpu.md).
  if (cuda_device_available())
    out.push_back({"cuda", "", [] { return make_cuda_backend(); }, 2e-5, 8});
#endif
  return out;
}

CaseGuard::CaseGuard(const BackendCase& c) {
  if (!c.simd.empty()) force_simd_level(c.simd.c_str());
}
CaseGuard::~CaseGuard() { force_simd_level(nullptr); }

DeviceTensor upload_bytes(Backend& be, const std::vector<uint8_t>& bytes, GgmlType type,
                          int64_t cols, int64_t rows) {
  DeviceTensor t;
  t.buf = be.allocator().allocate(std::max<size_t>(bytes.size(), 1));
  t.view = matrix_view(t.buf.data(), type, cols, rows, t.buf.space());
  be.copy(t.view, matrix_view(bytes.data(), type, cols, rows, MemSpace::Host));
  return t;
}

DeviceTensor upload(Backend& be, const std::vector<float>& host, int64_t cols, int64_t rows) {
  std::vector<uint8_t> bytes(host.size() * sizeof(float));
  std::memcpy(bytes.data(), host.data(), bytes.size());
  return upload_bytes(be, bytes, GgmlType::F32, cols, rows);
}

DeviceTensor poisoned(Backend& be, int64_t cols, int64_t rows) {
  return upload(be, std::vector<float>((size_t)cols * rows, std::nanf("")), cols, rows);
}

std::vector<float> download(Backend& be, const TensorView& v) {
  std::vector<float> out((size_t)v.cols() * v.rows());
  be.copy(f32_view(out.data(), v.cols(), v.rows()), v);
  be.synchronize();
  return out;
}

}  // namespace moeflow::test
