#include "backend/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "backend/cuda/cublas_check.h"

namespace feast::cuda {
namespace {

// Blocks are rounded to 512 bytes (cudaMalloc aligns to 256 anyway) so that nearly equal sizes
// share cached blocks.
size_t rounded(size_t bytes) { return (bytes + 511) / 512 * 512; }

std::string mib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return s;
}

}  // namespace

CudaAllocator::~CudaAllocator() {
  release_cache();
  // Live blocks belong to tensors that outlive the backend only in a broken program; they are
  // left to the driver, which frees them at exit.
}

void* CudaAllocator::allocate(size_t bytes) {
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  std::lock_guard lock(mutex_);
  void* p = nullptr;
  // The smallest cached block that fits, if it is not more than twice the request (a larger one
  // would waste more than it saves).
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    p = it->second;
    sizes_[p] = it->first;
    in_use_ += it->first;
    free_.erase(it);
  } else {
    FEAST_CUDA_CHECK(cudaSetDevice(device_.index));
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cache();
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw Error("out of memory on " + device_.name() + ": asked for " + mib(size) + " with " + mib(in_use_) +
                  " in use by this rank and " + mib(free_bytes) + " of " + mib(total_bytes) +
                  " free on the device (" + cudaGetErrorString(err) +
                  "); lower parallel.micro_batch_size or training.seq_len, or shard more (parallel.zero_stage, tp, pp)");
    }
    sizes_[p] = size;
    in_use_ += size;
  }
  peak_ = std::max(peak_, in_use_);
  // Allocations happen while a run is built, not inside a step, so they may wait: a cached block
  // can still be read by work in flight on a stream, which must finish before it is cleared.
  FEAST_CUDA_CHECK(cudaDeviceSynchronize());
  FEAST_CUDA_CHECK(cudaMemset(p, 0, size));
  FEAST_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void CudaAllocator::deallocate(void* p) noexcept {
  if (!p) return;
  std::lock_guard lock(mutex_);
  const auto it = sizes_.find(p);
  if (it == sizes_.end()) return;
  in_use_ -= it->second;
  free_.emplace(it->second, p);
  sizes_.erase(it);
}

void CudaAllocator::release_cache() noexcept {
  if (free_.empty()) return;
  // Work already enqueued may still read a cached block (it was freed by the host in stream
  // order): wait for the device before giving blocks back.
  cudaDeviceSynchronize();
  for (const auto& [size, p] : free_) cudaFree(p);
  free_.clear();
}

}  // namespace feast::cuda
