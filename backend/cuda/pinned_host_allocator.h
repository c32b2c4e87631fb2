// Page-locked host memory (cudaHostAlloc): what the GPU copies to and from at full PCIe speed
// and asynchronously. Offloaded optimizer state lives here; the tensors are host tensors (kCpu)
// that CPU code reads and writes like any other.
#pragma once

#include "core/tensor.h"

namespace feast::cuda {

class PinnedHostAllocator final : public Allocator {
 public:
  Device device() const override { return kCpu; }
  // Zero-filled; throws std::bad_alloc when the driver has no pinned memory to give.
  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;
};

}  // namespace feast::cuda
