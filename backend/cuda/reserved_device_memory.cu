#include "backend/cuda/reserved_device_memory.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "backend/cuda/cublas_check.h"
#include "core/error.h"

namespace feast::cuda {
namespace {

// The driver calls, looked up once through the runtime (CUDA 12's signatures).
struct Driver {
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  bool complete() const { return attribute && granularity && reserve && free && create && release && map && unmap && set_access; }
};

template <typename F>
void look_up(const char* symbol, F& f) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    f = reinterpret_cast<F>(p);
  cudaGetLastError();  // a symbol the driver lacks leaves no sticky error behind
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    look_up("cuDeviceGetAttribute", x.attribute);
    look_up("cuMemGetAllocationGranularity", x.granularity);
    look_up("cuMemAddressReserve", x.reserve);
    look_up("cuMemAddressFree", x.free);
    look_up("cuMemCreate", x.create);
    look_up("cuMemRelease", x.release);
    look_up("cuMemMap", x.map);
    look_up("cuMemUnmap", x.unmap);
    look_up("cuMemSetAccess", x.set_access);
    return x;
  }();
  return d;
}

CUmemAllocationProp page_properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

void check(CUresult r, const std::string& what) {
  FEAST_CHECK(r == CUDA_SUCCESS, "CUDA virtual memory: " << what << " failed (CUresult " << int(r) << ")");
}

}  // namespace

ReservedDeviceAllocator::ReservedDeviceAllocator(int device_index, cudaStream_t stream)
    : device_(device_index), stream_(stream) {
  const Driver& d = driver();
  if (!d.complete()) return;
  int supported = 0;
  if (d.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, CUdevice(device_index)) !=
      CUDA_SUCCESS)
    supported = 0;
  if (!supported) return;
  const CUmemAllocationProp prop = page_properties(device_);
  size_t granularity = 0;
  if (d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS) page_ = granularity;
}

ReservedDeviceAllocator::~ReservedDeviceAllocator() {
  // Ranges still reserved belong to tensors that outlive the backend only in a broken program.
}

void ReservedDeviceAllocator::map_page(uintptr_t address, uint64_t& handle) {
  const Driver& d = driver();
  const CUmemAllocationProp prop = page_properties(device_);
  CUmemGenericAllocationHandle h = 0;
  check(d.create(&h, page_, &prop, 0), "cuMemCreate of one page");
  const CUresult mapped = d.map(CUdeviceptr(address), page_, 0, h, 0);
  if (mapped != CUDA_SUCCESS) {
    d.release(h);
    check(mapped, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(d.set_access(CUdeviceptr(address), page_, &access, 1), "cuMemSetAccess");
  handle = h;
}

void ReservedDeviceAllocator::unmap_page(uintptr_t address, uint64_t& handle) noexcept {
  const Driver& d = driver();
  d.unmap(CUdeviceptr(address), page_);
  d.release(CUmemGenericAllocationHandle(handle));
  handle = 0;
}

void* ReservedDeviceAllocator::allocate(size_t bytes) {
  FEAST_CHECK(page_ > 0, "CUDA virtual memory is not available on device " << device_);
  const size_t size = (std::max<size_t>(bytes, 1) + page_ - 1) / page_ * page_;
  CUdeviceptr base = 0;
  check(driver().reserve(&base, size, page_, 0, 0), "cuMemAddressReserve of " + std::to_string(size) + " bytes");
  Range range{size, std::vector<uint64_t>(size / page_, 0)};
  for (size_t p = 0; p < range.handles.size(); ++p) map_page(uintptr_t(base) + p * page_, range.handles[p]);
  FEAST_CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<void*>(base), 0, size, stream_));
  FEAST_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::lock_guard<std::mutex> lock(mutex_);
  ranges_[uintptr_t(base)] = std::move(range);
  return reinterpret_cast<void*>(base);
}

void ReservedDeviceAllocator::deallocate(void* p) noexcept {
  if (!p) return;
  cudaStreamSynchronize(stream_);
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranges_.find(uintptr_t(p));
  if (it == ranges_.end()) return;
  for (size_t i = 0; i < it->second.handles.size(); ++i)
    if (it->second.handles[i]) unmap_page(it->first + i * page_, it->second.handles[i]);
  driver().free(CUdeviceptr(it->first), it->second.bytes);
  ranges_.erase(it);
}

std::pair<ReservedDeviceAllocator::Range*, size_t> ReservedDeviceAllocator::locate(void* data, size_t bytes) {
  const uintptr_t at = uintptr_t(data);
  FEAST_CHECK(page_ > 0 && at % page_ == 0 && bytes % page_ == 0,
              "CUDA virtual memory: " << bytes << " bytes at " << data << " are not whole pages of " << page_);
  auto it = ranges_.upper_bound(at);
  FEAST_CHECK(it != ranges_.begin(), "CUDA virtual memory: " << data << " is in no reserved range");
  --it;
  FEAST_CHECK(at + bytes <= it->first + it->second.bytes,
              "CUDA virtual memory: " << bytes << " bytes at " << data << " run past their reserved range");
  return {&it->second, (at - it->first) / page_};
}

void ReservedDeviceAllocator::commit(void* data, size_t bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto [range, first] = locate(data, bytes);
  for (size_t i = 0; i < bytes / page_; ++i)
    if (!range->handles[first + i]) map_page(uintptr_t(data) + i * page_, range->handles[first + i]);
}

void ReservedDeviceAllocator::decommit(void* data, size_t bytes) {
  // Kernels queued before this call may still read the pages: wait for them first.
  FEAST_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::lock_guard<std::mutex> lock(mutex_);
  auto [range, first] = locate(data, bytes);
  for (size_t i = 0; i < bytes / page_; ++i)
    if (range->handles[first + i]) unmap_page(uintptr_t(data) + i * page_, range->handles[first + i]);
}

}  // namespace feast::cuda
