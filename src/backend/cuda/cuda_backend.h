#pragma once
// The CUDA backend: every Backend op as device kernels on one stream (docs/gpu.md). This
// header is plain C++ (no CUDA headers), so host-only code and the tests can include it; it is
// only compiled in with -DMOEFLOW_CUDA=ON (MOEFLOW_HAVE_CUDA=1).
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/device_link.h"

namespace moeflow {

struct CudaOptions {
  int device = 0;
  // Capture the decode step's work between host decisions as CUDA graphs (docs/gpu.md). The
  // environment variable MOEFLOW_CUDA_GRAPHS=0 turns it off whatever this says.
  bool graphs = true;
};

// True when the CUDA runtime finds a usable device. Never throws.
bool cuda_device_available();
// Why there is no usable device (the CUDA runtime's words), or "" when there is one.
std::string cuda_unavailable_reason();
// "NVIDIA H100 80GB HBM3, compute capability 9.0, 79.1 GiB" for logs; throws without a device.
std::string cuda_device_description(int device = 0);

// Throws moeflow::Error naming the reason when no device is usable.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& opt = {});

// Copies into device `device`'s memory beside any backend's compute (a VRAM expert cache's
// transfers, backend/device_link.h). Throws moeflow::Error without a device.
std::unique_ptr<DeviceLink> make_cuda_device_link(int device = 0);

// The decode-step graphs a CUDA backend has launched, its sync points and host registrations
// (docs/gpu.md); zeros for other backends.
struct CudaGraphCounts {
  uint64_t launches = 0;        // segments run as graphs
  uint64_t instantiations = 0;  // executable graphs built
  uint64_t updates = 0;         // executable graphs reused with new parameters
  uint64_t ops = 0;             // ops captured
  uint64_t sync_points = 0;     // host waits for the backend's stream
  uint64_t registrations = 0;   // cudaHostRegister calls of weight uploads
};
// What happened between two readings, field by field.
inline CudaGraphCounts operator-(const CudaGraphCounts& a, const CudaGraphCounts& b) {
  return {a.launches - b.launches,       a.instantiations - b.instantiations,
          a.updates - b.updates,         a.ops - b.ops,
          a.sync_points - b.sync_points, a.registrations - b.registrations};
}
CudaGraphCounts cuda_graph_counts(const Backend& b);

}  // namespace moeflow
