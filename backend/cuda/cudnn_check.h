// cuDNN's check macro, beside FEAST_CUDA_CHECK and FEAST_CUBLAS_CHECK (backend/cuda/cublas_check.h):
// a failed call throws feast::Error naming the call, cuDNN's description of the failure, the file
// and the line. The frontend's graph calls return error objects instead, which
// attention_cudnn.cpp reports with the attention's shape.
#pragma once

#include <cudnn.h>

#include <string>

#include "core/cuda/cuda_check.h"

#define FEAST_CUDNN_CHECK(call)                                                                              \
  do {                                                                                                      \
    const cudnnStatus_t feast_cudnn_status_ = (call);                                                       \
    if (feast_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                                        \
      ::feast::cuda::throw_cuda_failure("cuDNN", #call, cudnnGetErrorString(feast_cudnn_status_), __FILE__,  \
                                        __LINE__);                                                          \
  } while (0)
