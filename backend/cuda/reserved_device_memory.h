// Device address space whose pages hold memory only while mapped: CUDA's virtual memory
// management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemUnmap), reached through the
// runtime's driver entry points so that the binary does not link libcuda (it must start on
// machines without a GPU driver). The CUDA backend's reserve(), commit() and decommit(): ZeRO 3
// keeps a stage's flat parameter buffer as such a range and maps only its shard, what stays
// whole and the blocks gathered at the moment.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/tensor.h"

namespace feast::cuda {

class ReservedDeviceAllocator final : public Allocator {
 public:
  // stream: the backend's; decommit waits for it, so no queued kernel reads an unmapped page.
  ReservedDeviceAllocator(int device_index, cudaStream_t stream);
  ~ReservedDeviceAllocator() override;
  ReservedDeviceAllocator(const ReservedDeviceAllocator&) = delete;
  ReservedDeviceAllocator& operator=(const ReservedDeviceAllocator&) = delete;

  // The mapping granularity (2 MiB on current GPUs); 0 when the device or the driver has no
  // virtual memory management, and then nothing here may be called.
  size_t page_bytes() const { return page_; }

  Device device() const override { return {DeviceType::kCuda, device_}; }
  // Reserved, every page mapped and zeroed; throws feast::Error when the driver refuses.
  void* allocate(size_t bytes) override;
  void deallocate(void* p) noexcept override;
  // Whole pages of a reserved range: map those not mapped (their values are undefined), or wait
  // for the stream and unmap those mapped.
  void commit(void* data, size_t bytes);
  void decommit(void* data, size_t bytes);

 private:
  struct Range {
    size_t bytes = 0;                  // reserved, a multiple of page_
    std::vector<uint64_t> handles;     // per page: its physical allocation, 0 when unmapped
  };
  // The range holding [data, data + bytes), and the index of its page at data; throws when none.
  std::pair<Range*, size_t> locate(void* data, size_t bytes);
  void map_page(uintptr_t address, uint64_t& handle);
  void unmap_page(uintptr_t address, uint64_t& handle) noexcept;

  int device_;
  cudaStream_t stream_;
  size_t page_ = 0;
  std::mutex mutex_;
  std::map<uintptr_t, Range> ranges_;
};

}  // namespace feast::cuda
