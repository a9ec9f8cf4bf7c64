#pragma once
// Which Backend runs the forward pass (`--backend cpu|cuda`).
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/device_link.h"
#include "core/thread_pool.h"

namespace moeflow {

enum class BackendKind : uint8_t { Cpu, Cuda };

// "cpu" | "cuda"; throws naming the choices.
BackendKind parse_backend_kind(const std::string& name);
const char* backend_kind_name(BackendKind k);
// True when this binary was built with the CUDA backend (-DMOEFLOW_CUDA=ON).
bool cuda_built_in();
// A backend of that kind (the CPU one over `pool`, which may be null). Throws moeflow::Error
// saying why when it cannot be had: built without CUDA, or no CUDA device.
std::unique_ptr<Backend> make_backend(BackendKind k, ThreadPool* pool);
// The bus to a device backend's memory (a VRAM expert cache's copies); same errors.
std::shared_ptr<DeviceLink> make_device_link(BackendKind k);

}  // namespace moeflow
