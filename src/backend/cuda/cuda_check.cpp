#include "backend/cuda/cuda_check.h"

#include <cstring>

#include "core/error.h"

namespace moeflow::cuda {
namespace {

const char* base_name(const char* path) {
  const char* s = std::strrchr(path, '/');
  return s ? s + 1 : path;
}

}  // namespace

void throw_error(const std::string& msg) { throw Error(msg); }

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  fail("CUDA error in {} ({}:{}): {} ({})", call, base_name(file), line, cudaGetErrorString(e),
       cudaGetErrorName(e));
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  fail("cuBLAS error in {} ({}:{}): {} ({})", call, base_name(file), line, cublasGetStatusString(s),
       (int)s);
}

}  // namespace moeflow::cuda
