#include "backend/cuda/cuda_stream.h"

#include "backend/cuda/cublas_check.h"

namespace feast::cuda {

cudaStream_t handle_of(Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  FEAST_CHECK(cuda != nullptr, "a CUDA stream was expected, not another backend's");
  return cuda->handle();
}

CudaStream::CudaStream(int device_index) {
  FEAST_CUDA_CHECK(cudaSetDevice(device_index));
  FEAST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaStream::synchronize() { FEAST_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// Timing off: the events only order work, and timing makes record() slower.
CudaEvent::CudaEvent() { FEAST_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::record(Stream& stream) { FEAST_CUDA_CHECK(cudaEventRecord(event_, handle_of(stream))); }
void CudaEvent::block(Stream& stream) { FEAST_CUDA_CHECK(cudaStreamWaitEvent(handle_of(stream), event_, 0)); }
void CudaEvent::synchronize() { FEAST_CUDA_CHECK(cudaEventSynchronize(event_)); }

}  // namespace feast::cuda
