#include "backend/cuda/pinned_host_allocator.h"

#include <cuda_runtime.h>

#include <cstring>
#include <new>

namespace feast::cuda {

void* PinnedHostAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a failed allocation
    throw std::bad_alloc();
  }
  std::memset(p, 0, bytes);
  return p;
}

void PinnedHostAllocator::deallocate(void* p) noexcept {
  if (p) cudaFreeHost(p);
}

}  // namespace feast::cuda
