// One check macro per CUDA library: a failed call throws feast::Error naming the call, the
// library's own description of the failure, the file and the line. The rank is added where the
// error is printed (log::error prefixes "[rank r]" in a job of several ranks).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

#include "core/error.h"

namespace feast::cuda {

[[noreturn]] inline void throw_cuda_failure(const char* library, const char* call, const std::string& what,
                                            const char* file, int line) {
  std::ostringstream os;
  os << library << " call `" << call << "` failed: " << what << " at " << file << ":" << line;
  throw Error(os.str());
}

inline std::string cublas_status_text(cublasStatus_t s) {
  return std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")";
}

}  // namespace feast::cuda

#define FEAST_CUDA_CHECK(call)                                                                              \
  do {                                                                                                      \
    const cudaError_t feast_cuda_err_ = (call);                                                             \
    if (feast_cuda_err_ != cudaSuccess)                                                                     \
      ::feast::cuda::throw_cuda_failure("CUDA", #call,                                                      \
                                        std::string(cudaGetErrorName(feast_cuda_err_)) + " (" +             \
                                            cudaGetErrorString(feast_cuda_err_) + ")",                      \
                                        __FILE__, __LINE__);                                                \
  } while (0)

#define FEAST_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                      \
    const cublasStatus_t feast_cublas_status_ = (call);                                                     \
    if (feast_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::feast::cuda::throw_cuda_failure("cuBLAS", #call, ::feast::cuda::cublas_status_text(feast_cublas_status_), \
                                        __FILE__, __LINE__);                                                \
  } while (0)

// After a kernel launch: a bad launch configuration is reported here, at the launch that made it.
#define FEAST_CUDA_LAUNCH_CHECK(kernel_name) FEAST_CUDA_CHECK(cudaPeekAtLastError())
