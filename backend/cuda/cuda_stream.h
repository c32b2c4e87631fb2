// Stream and Event (core/stream.h) over a CUDA stream and CUDA events.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "core/stream.h"

namespace feast::cuda {

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device_index);  // a non-blocking stream on that device
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  void synchronize() override;
  void* native_handle() const override { return stream_; }
  cudaStream_t handle() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The cudaStream_t of a stream that must be a CudaStream (another kind throws).
cudaStream_t handle_of(Stream& stream);

class CudaEvent final : public Event {
 public:
  CudaEvent();
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  // Both need the stream to be a CudaStream; another kind throws.
  void record(Stream& stream) override;
  void block(Stream& stream) override;
  void synchronize() override;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace feast::cuda
