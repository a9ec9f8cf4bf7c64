#pragma once
// Which Backend runs the forward pass (`--backend cpu|cuda|standin`). `standin` is the stand-in
// device (backend/standin/standin_device.h): the CPU's arithmetic behind a GPU's memory rules,
// for checking the device paths on a machine without a GPU; its VRAM size comes from
// MOEFLOW_STANDIN_VRAM (a byte size such as 8GiB; default 16 GiB).
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/device_link.h"
#include "core/thread_pool.h"

namespace moeflow {

enum class BackendKind : uint8_t { Cpu, Cuda, StandIn };

// "cpu" | "cuda" | "standin"; throws naming the choices.
BackendKind parse_backend_kind(const std::string& name);
const char* backend_kind_name(BackendKind k);
// True when this binary was built with the CUDA backend (-DMOEFLOW_CUDA=ON).
bool cuda_built_in();
// "" when a backend of that kind can be made here, else why not ("no CUDA device: ...",
// "this moeflow was built without CUDA ..."). Never throws.
std::string device_unavailable_reason(BackendKind k);
// A backend of that kind (the CPU one over `pool`, which may be null). Throws moeflow::Error
// saying why when it cannot be had: built without CUDA, or no CUDA device.
std::unique_ptr<Backend> make_backend(BackendKind k, ThreadPool* pool);
// The bus to a device backend's memory (a VRAM expert cache's copies); same errors.
std::shared_ptr<DeviceLink> make_device_link(BackendKind k);

}  // namespace moeflow
