// The CUDA runtime's check macro, for every CUDA source of the project (core's device helpers,
// the backend's kernels, the NCCL communicator): a failed call throws feast::Error naming the
// call, CUDA's description of the failure, the file and the line. The rank is added where the
// error is printed (log::error prefixes "[rank r]" in a job of several ranks).
#pragma once

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

}  // namespace feast::cuda

// cudaGetLastError() clears the error, so later calls start clean.
#define FEAST_CUDA_CHECK(call)                                                                              \
  do {                                                                                                      \
    const cudaError_t feast_cuda_err_ = (call);                                                             \
    if (feast_cuda_err_ != cudaSuccess) {                                                                   \
      cudaGetLastError();                                                                                   \
      ::feast::cuda::throw_cuda_failure("CUDA", #call,                                                      \
                                        std::string(cudaGetErrorName(feast_cuda_err_)) + " (" +             \
                                            cudaGetErrorString(feast_cuda_err_) + ")",                      \
                                        __FILE__, __LINE__);                                                \
    }                                                                                                       \
  } while (0)
