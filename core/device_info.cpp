#include "core/device_info.h"

#include <omp.h>

#include <string>

namespace feast {

#if !defined(FEAST_WITH_CUDA)
bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_name() { return ""; }
std::array<uint8_t, 16> cuda_device_uuid() { return {}; }
#else
bool cuda_backend_built() { return true; }
#endif

std::string describe_devices() {
  std::string s = "cpu: " + std::to_string(omp_get_max_threads()) + " OpenMP threads";
  if (cuda_backend_built()) {
    s += "; cuda: built, " + std::to_string(cuda_device_count()) + " device(s) visible";
  } else {
    s += "; cuda: not built";
  }
  return s;
}

}  // namespace feast
