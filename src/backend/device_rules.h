#pragma once
// The rules device memory follows on a GPU, in one place for every allocator that hands it out:
// the CUDA backend's (backend/cuda/cuda_alloc.cpp) and the stand-in device's
// (backend/standin/), so a caller that breaks one of them fails on a machine without a GPU
// exactly as it would on one.
#include <cstddef>

namespace moeflow {

// cudaMalloc returns 256-byte aligned memory and takes no alignment argument: a caller that
// needs more must not ask the device allocator for it (O_DIRECT's 4 KiB applies to the host
// buffers a file is read into, not to device slots).
constexpr size_t kDeviceMaxAlignment = 256;
// cudaHostAlloc returns whole pages.
constexpr size_t kPinnedMaxAlignment = 4096;

// Throws moeflow::Error "<who>: alignment N is not a power of two up to MAX" when `alignment`
// breaks the rule.
void check_alignment(const char* who, size_t alignment, size_t max_alignment);

}  // namespace moeflow
