// CUDA errors into the library's Status: CUDA_TRY(expr) returns a Runtime
// error naming the call and the CUDA error string.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "pagecheck/status.hpp"

namespace pagecheck::gpu {
inline Error cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  return runtime_error(std::string(what) + " failed: " + cudaGetErrorString(err) + " (" + file + ":" +
                           std::to_string(line) + ")",
                       "cuda");
}
}  // namespace pagecheck::gpu

#define CUDA_TRY(expr)                                                                  \
  do {                                                                                  \
    cudaError_t pc_cuda_err_ = (expr);                                                  \
    if (pc_cuda_err_ != cudaSuccess)                                                    \
      return ::pagecheck::gpu::cuda_error(pc_cuda_err_, #expr, __FILE__, __LINE__);     \
  } while (0)
// After a kernel launch: launch-configuration errors.
#define CUDA_TRY_LAUNCH() CUDA_TRY(cudaGetLastError())
