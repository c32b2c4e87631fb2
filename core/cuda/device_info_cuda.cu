// CUDA side of device_info: counts devices through the runtime. A missing driver is not an
// error here (the CPU backend still works); it reads as zero devices.
#include <cuda_runtime.h>

#include <string>

#include "core/device_info.h"

namespace feast {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return n;
}

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

std::array<uint8_t, 16> cuda_device_uuid() {
  std::array<uint8_t, 16> out{};
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(prop.uuid.bytes[i]);
  return out;
}

}  // namespace feast
