#include "runtime/backend_choice.h"

#include <cstdlib>

#include "backend/cpu/cpu_backend.h"
#include "backend/standin/standin_device.h"
#include "core/error.h"
#include "runtime/offload_session.h"
#if MOEFLOW_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace moeflow {

BackendKind parse_backend_kind(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "cuda") return BackendKind::Cuda;
  if (name == "standin") return BackendKind::StandIn;
  fail("--backend: unknown backend '{}' (known: cpu, cuda, standin)", name);
}

const char* backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::Cuda: return "cuda";
    case BackendKind::StandIn: return "standin";
    default: return "cpu";
  }
}

namespace {

// The stand-in's VRAM size from MOEFLOW_STANDIN_VRAM, once per process (before its first buffer).
void configure_standin() {
  static const bool done = [] {
    if (const char* e = std::getenv("MOEFLOW_STANDIN_VRAM"); e && *e)
      set_standin_vram(parse_byte_size(e, "MOEFLOW_STANDIN_VRAM"));
    return true;
  }();
  (void)done;
}

}  // namespace

bool cuda_built_in() {
#if MOEFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string device_unavailable_reason(BackendKind k) {
  if (k != BackendKind::Cuda) return "";
#if MOEFLOW_HAVE_CUDA
  if (!cuda_device_available()) return "no CUDA device: " + cuda_unavailable_reason();
  return "";
#else
  return "this moeflow was built without CUDA (configure with -DMOEFLOW_CUDA=ON)";
#endif
}

std::unique_ptr<Backend> make_backend(BackendKind k, ThreadPool* pool) {
  if (k == BackendKind::Cpu) return std::make_unique<CpuBackend>(pool);
  if (k == BackendKind::StandIn) {
    configure_standin();
    return make_standin_backend(pool ? pool->size() : 1);
  }
  const std::string why = device_unavailable_reason(k);
#if MOEFLOW_HAVE_CUDA
  if (why.empty()) return make_cuda_backend();
#endif
  fail("--backend cuda: {}", why);
}

std::shared_ptr<DeviceLink> make_device_link(BackendKind k) {
  if (k == BackendKind::Cpu) fail("the CPU backend has no device memory to link to");
  if (k == BackendKind::StandIn) {
    configure_standin();
    return make_standin_device_link();
  }
  const std::string why = device_unavailable_reason(k);
#if MOEFLOW_HAVE_CUDA
  if (why.empty()) return make_cuda_device_link();
#endif
  fail("--backend cuda: {}", why);
}

}  // namespace moeflow
