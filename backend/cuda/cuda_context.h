// What every CUDA launcher needs besides its operands: the stream it enqueues on, the cuBLASLt
// handle and workspace (and a cuBLAS handle for products cuBLASLt has no kernel for), a scratch buffer for partial results, pinned uploads of small host arrays, and the device's shape (SM count)
// to size grids. The CudaBackend owns one and passes it to every launcher.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace feast::cuda {

class HostUploads;

// A grow-only device buffer for an op's temporaries (partial sums of a two-pass reduction, say,
// or cuDNN's workspace). Ops on one stream run one after another, so one buffer serves them all.
// It grows during the first step, so it allocates in stream order (cudaMallocAsync and
// cudaFreeAsync on its stream): the old buffer is released after the ops queued before, and
// nothing waits for the whole device, where a pipeline transfer or a reduction may still be
// waiting for its peer. After the first step it no longer grows, so steps do not allocate.
class DeviceScratch {
 public:
  explicit DeviceScratch(cudaStream_t stream) : stream_(stream) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  // At least `bytes` of device memory, 256-byte aligned, valid until the next get().
  void* get(size_t bytes);
  template <typename T>
  T* get_as(size_t count) {
    return static_cast<T*>(get(count * sizeof(T)));
  }
  // What it holds now, which is the most it has held: the backend adds it to its peak.
  size_t bytes() const { return bytes_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct CudaContext {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // cuBLASLt's workspace (kLtWorkspaceBytes)
  cublasHandle_t blas = nullptr;  // on `stream`
  DeviceScratch* scratch = nullptr;
  HostUploads* uploads = nullptr;  // small host-to-device copies queued like kernels (host_uploads.h)
  int sm_count = 1;
  int cc_major = 0;  // compute capability, major (9: Hopper)
};

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

}  // namespace feast::cuda
