#include "backend/backend.h"

#include "core/device_info.h"
#include "core/error.h"
#include "backend/cpu/cpu_backend.h"
#if defined(FEAST_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace feast {

DType compute_dtype_for(const std::string& device, const std::string& dtype) {
  if (device == "cpu") {
    if (dtype == "auto" || dtype == "fp32") return DType::kFloat32;
    throw ConfigError("training.dtype = \"" + dtype + "\" needs training.device = \"cuda\": the CPU backend "
                      "computes in float32; use training.dtype = \"auto\" or \"fp32\"");
  }
  if (device == "cuda") {
    if (dtype == "auto" || dtype == "bf16") return DType::kBFloat16;
    if (dtype == "fp32") return DType::kFloat32;
  }
  throw ConfigError("training.device = \"" + device + "\" with training.dtype = \"" + dtype +
                    "\": the devices are \"cpu\" and \"cuda\", the dtypes \"auto\", \"fp32\" and \"bf16\"");
}

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& dtype, int local_rank) {
  const DType compute = compute_dtype_for(device, dtype);
  if (device == "cpu") return std::make_unique<CpuBackend>();
  if (!cuda_backend_built())
    throw ConfigError("training.device = \"cuda\": no CUDA device is available: this trainer was built without "
                      "the CUDA backend (configure with -DFEAST_CUDA=ON where nvcc is installed), or use "
                      "training.device = \"cpu\"");
  const int count = cuda_device_count();
  if (count == 0)
    throw ConfigError("training.device = \"cuda\": no CUDA device is available: the driver reports no GPU "
                      "(check nvidia-smi and CUDA_VISIBLE_DEVICES), or use training.device = \"cpu\"");
#if defined(FEAST_WITH_CUDA)
  return make_cuda_backend(local_rank % count, compute);
#else
  (void)local_rank;
  (void)compute;
  throw ConfigError("training.device = \"cuda\": this build has no CUDA backend");
#endif
}

}  // namespace feast
