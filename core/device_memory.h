// Host-side access to device memory for code that is not a backend: telling a device pointer
// from a host one, copying between them, and pinned host buffers for staging. The communicators
// use it to move GPU buffers through MPI (comm/staged_communicator.h). In a build without
// CUDA every pointer is host memory and the copies are plain memcpy.
#pragma once

#include <cstddef>

namespace feast {

// Whether p points into memory of a CUDA device (false for host memory, pinned or not).
bool is_device_memory(const void* p);

// Copies `bytes` between any two of host and device memory, after all work already queued on
// the current device has finished (so a kernel's result is what is copied), and returns when
// the copy is complete.
void copy_memory(void* dst, const void* src, size_t bytes);

// The calling thread's current CUDA device, or -1 (no CUDA, no device); and making `device`
// current for the calling thread (nothing for -1). A thread that touches device memory without
// it talks to GPU 0 and makes a context there.
int current_device();
void use_device(int device);

// Page-locked host memory, which the GPU copies to and from at full speed. Reused through a
// process-wide cache, so staging a buffer of a size seen before allocates nothing.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace feast
