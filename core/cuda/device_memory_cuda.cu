// The CUDA side of core/device_memory.h.
#include <cuda_runtime_api.h>

#include <new>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/device_memory.h"
#include "core/error.h"

namespace feast {

bool is_device_memory(const void* p) {
  if (!p) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // no driver, or memory CUDA never saw: host memory either way
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void copy_memory(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  // Kernels run on non-blocking streams, which cudaMemcpy does not wait for.
  FEAST_CUDA_CHECK(cudaDeviceSynchronize());
  FEAST_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

void use_device(int device) {
  if (device >= 0) FEAST_CUDA_CHECK(cudaSetDevice(device));
}

void* allocate_pinned(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  return p;
}

void free_pinned(void* p) noexcept { cudaFreeHost(p); }

}  // namespace feast
