// Small host-to-device copies (a micro-batch's tokens and targets) that queue like kernels.
// From pageable memory cudaMemcpyAsync first waits for the whole stream, so every micro-batch
// would leave the GPU idle while the host queues the next kernels. Instead the bytes are copied
// at once into one of a few pinned buffers and sent from there asynchronously; a buffer is
// reused only after the copy out of it has finished (an event), so the caller may change its
// own buffer as soon as upload() returns.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>

namespace feast::cuda {

class HostUploads {
 public:
  static constexpr size_t kSlotBytes = size_t{1} << 20;  // a 16 x 16384 micro-batch of int32 tokens
  // A slot is reused after kSlots more uploads, and waits for its copy: a mixture-of-experts
  // block uploads about five small tables per pass (routing, the grouped products' pointers), so
  // 16 let the host queue a few blocks ahead of the GPU.
  static constexpr int kSlots = 16;

  explicit HostUploads(cudaStream_t stream) : stream_(stream) {}
  ~HostUploads();
  HostUploads(const HostUploads&) = delete;
  HostUploads& operator=(const HostUploads&) = delete;

  // Enqueues dst (device) = src (host, `bytes`) on the stream and returns true, or returns false
  // for a copy larger than a slot (the caller copies it the plain way).
  bool upload(void* dst, const void* src, size_t bytes);

 private:
  cudaStream_t stream_;
  void* pinned_ = nullptr;  // kSlots slots of kSlotBytes, allocated on first use
  std::array<cudaEvent_t, kSlots> done_{};
  int next_ = 0;
};

}  // namespace feast::cuda
