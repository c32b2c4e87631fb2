#include "backend/backend.h"

#include <algorithm>

#include "core/device_info.h"
#include "core/error.h"
#include "backend/cpu/cpu_backend.h"
#if defined(FEAST_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace feast {

void LoraShape::check(const std::string& op) const {
  FEAST_CHECK(col >= 0 && OC >= 0 && col + OC <= out_ld,
              op << ": adapter columns [" << col << ", " << col + OC << ") of an output " << out_ld << " wide");
}

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

void cast_across(Backend& backend, const TensorView& dst, const TensorView& src, const TensorView& scratch) {
  FEAST_CHECK(dst.numel == src.numel, "cast_across: " << src.numel << " elements into " << dst.numel);
  if (src.numel == 0) return;
  if (dst.dtype == src.dtype) return backend.copy(dst, src);
  FEAST_CHECK(scratch.dtype == DType::kFloat32 && scratch.numel > 0, "cast_across needs a float32 scratch");
  const bool to_host = dst.device.is_cpu();
  for (size_t at = 0; at < src.numel; at += scratch.numel) {
    const size_t n = std::min(scratch.numel, src.numel - at);
    const TensorView chunk = scratch.first(n);
    if (to_host) {
      backend.cast(chunk, src.slice(at, n));
      backend.copy(dst.slice(at, n), chunk);
    } else {
      backend.copy(chunk, src.slice(at, n));
      backend.cast(dst.slice(at, n), chunk);
    }
  }
}

void cast_across(Backend& backend, const TensorView& dst, const TensorView& src) {
  if (dst.dtype == src.dtype) return cast_across(backend, dst, src, {});
  const Tensor scratch = backend.allocate(DType::kFloat32, std::min(src.numel, kCastAcrossChunk));
  cast_across(backend, dst, src, scratch.view());
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
