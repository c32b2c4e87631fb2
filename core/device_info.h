// What compute devices this build can use: the CPU always, CUDA GPUs when the CUDA backend is
// built. The trainer prints this at start and validates `training.device` against it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace feast {

bool cuda_backend_built();
// Number of visible CUDA devices (0 when the backend is not built or no driver is present).
int cuda_device_count();
// The name CUDA reports for the calling thread's current GPU ("NVIDIA H200"); "" when there is none.
std::string cuda_device_name();
// The 16 bytes of the current GPU's UUID (which GPU it is, whatever CUDA_VISIBLE_DEVICES calls
// it); zeros when there is none.
std::array<uint8_t, 16> cuda_device_uuid();
// One line per device for the start-up banner.
std::string describe_devices();

}  // namespace feast
