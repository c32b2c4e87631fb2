#include "backend/cuda/host_uploads.h"

#include <cstring>

#include "backend/cuda/cublas_check.h"

namespace feast::cuda {

HostUploads::~HostUploads() {
  if (!pinned_) return;
  cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : done_)
    if (e) cudaEventDestroy(e);
  cudaFreeHost(pinned_);
}

bool HostUploads::upload(void* dst, const void* src, size_t bytes) {
  if (bytes > kSlotBytes) return false;
  if (!pinned_) {
    FEAST_CUDA_CHECK(cudaHostAlloc(&pinned_, kSlotBytes * kSlots, cudaHostAllocDefault));
    for (cudaEvent_t& e : done_) FEAST_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  // The slot's previous copy was enqueued kSlots uploads ago: normally long finished. (An
  // event never recorded counts as complete.)
  FEAST_CUDA_CHECK(cudaEventSynchronize(done_[size_t(slot)]));
  char* staging = static_cast<char*>(pinned_) + size_t(slot) * kSlotBytes;
  std::memcpy(staging, src, bytes);
  FEAST_CUDA_CHECK(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, stream_));
  FEAST_CUDA_CHECK(cudaEventRecord(done_[size_t(slot)], stream_));
  return true;
}

}  // namespace feast::cuda
