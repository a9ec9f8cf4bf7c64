#pragma once
// Every CUDA and cuBLAS call is checked; a failure becomes a moeflow::Error naming the call,
// where it was made and the library's own message.
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace moeflow::cuda {

// moeflow::Error(msg), for the .cu files (which keep fmt out of nvcc's way).
[[noreturn]] void throw_error(const std::string& msg);

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file,
                                     int line);

}  // namespace moeflow::cuda

#define MOEFLOW_CUDA_CHECK(call)                                                       \
  do {                                                                                 \
    const cudaError_t moeflow_cuda_err_ = (call);                                      \
    if (moeflow_cuda_err_ != cudaSuccess)                                              \
      ::moeflow::cuda::throw_cuda_error(moeflow_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define MOEFLOW_CUBLAS_CHECK(call)                                                        \
  do {                                                                                    \
    const cublasStatus_t moeflow_cublas_st_ = (call);                                     \
    if (moeflow_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::moeflow::cuda::throw_cublas_error(moeflow_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here; faults inside the kernel
// surface at the next synchronising call, which is checked too.
#define MOEFLOW_CUDA_CHECK_LAUNCH() MOEFLOW_CUDA_CHECK(cudaGetLastError())
