// The one device allocator of a CUDA backend: a caching allocator in the manner of PyTorch's.
// Freed blocks go to a free list by size and are handed out again, so a step that frees and
// re-allocates never reaches cudaMalloc; when cudaMalloc fails the cache is returned to the
// driver and the allocation retried once. It counts the bytes in use and their peak (the memory
// report and `trainer bench` print the peak).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace feast::cuda {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device_index) : device_{DeviceType::kCuda, device_index} {}
  ~CudaAllocator() override;
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  Device device() const override { return device_; }
  // Zero-filled; throws feast::Error naming the request and what is in use when the device is full.
  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;

  size_t peak_bytes_in_use() const { return peak_; }

 private:
  void release_cache() noexcept;

  Device device_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;          // rounded size -> cached block
  std::unordered_map<void*, size_t> sizes_;    // every live block's rounded size
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace feast::cuda
