// cuBLAS's check macro (cuBLAS and cuBLASLt), and the check after a kernel launch, beside the
// runtime's FEAST_CUDA_CHECK (core/cuda/cuda_check.h) and cuDNN's (cudnn_check.h): a failed call
// throws feast::Error naming the call, the library's own description of the failure, the file
// and the line.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "core/cuda/cuda_check.h"

namespace feast::cuda {

inline std::string cublas_status_text(cublasStatus_t s) {
  return std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")";
}

}  // namespace feast::cuda

#define FEAST_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                      \
    const cublasStatus_t feast_cublas_status_ = (call);                                                     \
    if (feast_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::feast::cuda::throw_cuda_failure("cuBLAS", #call, ::feast::cuda::cublas_status_text(feast_cublas_status_), \
                                        __FILE__, __LINE__);                                                \
  } while (0)

// After a kernel launch: a bad launch configuration is reported here, at the launch that made it.
#define FEAST_CUDA_LAUNCH_CHECK(kernel_name) FEAST_CUDA_CHECK(cudaPeekAtLastError())
