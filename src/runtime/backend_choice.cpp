#include "runtime/backend_choice.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#if MOEFLOW_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace moeflow {

BackendKind parse_backend_kind(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "cuda") return BackendKind::Cuda;
  fail("--backend: unknown backend '{}' (known: cpu, cuda)", name);
}

const char* backend_kind_name(BackendKind k) { return k == BackendKind::Cuda ? "cuda" : "cpu"; }

bool cuda_built_in() {
#if MOEFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(BackendKind k, ThreadPool* pool) {
  if (k == BackendKind::Cpu) return std::make_unique<CpuBackend>(pool);
#if MOEFLOW_HAVE_CUDA
  if (!cuda_device_available())
    fail("--backend cuda: no CUDA device: {}", cuda_unavailable_reason());
  return make_cuda_backend();
#else
  fail("--backend cuda: this moeflow was built without CUDA (configure with -DMOEFLOW_CUDA=ON)");
#endif
}

std::shared_ptr<DeviceLink> make_device_link(BackendKind k) {
  if (k == BackendKind::Cpu) fail("the CPU backend has no device memory to link to");
#if MOEFLOW_HAVE_CUDA
  if (!cuda_device_available())
    fail("--backend cuda: no CUDA device: {}", cuda_unavailable_reason());
  return make_cuda_device_link();
#else
  fail("--backend cuda: this moeflow was built without CUDA (configure with -DMOEFLOW_CUDA=ON)");
#endif
}

}  // namespace moeflow
