#include "backend/backend.h"

#include <algorithm>

#include "core/device_info.h"
#include "core/error.h"
#include "backend/nf4.h"
#include "backend/cpu/cpu_backend.h"
#if defined(FEAST_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace feast {

void LoraShape::check(const std::string& op) const {
  FEAST_CHECK(col >= 0 && OC >= 0 && col + OC <= out_ld,
              op << ": adapter columns [" << col << ", " << col + OC << ") of an output " << out_ld << " wide");
}

void check_dropout(const DropoutShape& s, const std::string& op) {
  FEAST_CHECK(s.p >= 0 && s.p < 1 && s.N >= 0 && s.C >= 0 && s.T >= 1 && s.N % s.T == 0 && s.first_sequence >= 0 &&
                  s.col0 >= 0 && s.col0 + s.C <= s.columns,
              op << ": p " << s.p << ", " << s.N << " rows of sequences of " << s.T << ", columns [" << s.col0 << ", "
                 << s.col0 + s.C << ") of " << s.columns);
}

void Nf4Piece::check(const std::string& op) const {
  const size_t r = size_t(rows), c = size_t(cols);
  FEAST_CHECK(codes.dtype == DType::kUInt8 && codes.numel >= (r * c + 1) / 2,
              op << ": " << codes.numel << " " << dtype_name(codes.dtype) << " codes for " << rows << " x " << cols);
  FEAST_CHECK((scales.dtype == DType::kFloat32 || scales.dtype == DType::kUInt8) &&
                  scales.numel >= r * size_t(scales_per_row),
              op << ": " << scales.numel << " " << dtype_name(scales.dtype) << " scales for " << rows << " rows of "
                 << scales_per_row);
  FEAST_CHECK(col0 >= 0 && row0 >= 0 && col0 + cols <= width, op << ": columns [" << col0 << ", " << col0 + cols
                                                                    << ") of a tensor " << width << " wide");
  FEAST_CHECK(nf4_scales_per_row(row0, col0, width, rows, cols) <= scales_per_row,
              op << ": a row touches more than " << scales_per_row << " blocks");
  if (double_quant()) {
    const int64_t last_block = ((row0 + rows - 1) * width + col0 + cols - 1) / kNf4BlockSize;
    FEAST_CHECK(absmax2.dtype == DType::kFloat32 && int64_t(absmax2.numel) > last_block / kNf4GroupSize,
                op << ": " << absmax2.numel << " second-level scales; block " << last_block << " needs more");
    FEAST_CHECK(scale_code.dtype == DType::kFloat32 && scale_code.numel == 256, op << ": the scale code needs 256 floats");
  }
}

void check_groups(const std::vector<TensorView>& weights, const std::vector<int>& offsets, const char* op) {
  FEAST_CHECK(offsets.size() == weights.size() + 1 && offsets.front() == 0,
              op << ": " << weights.size() << " weights need " << weights.size() + 1 << " row offsets from 0, not "
                 << offsets.size());
  for (size_t g = 0; g < weights.size(); ++g)
    FEAST_CHECK(offsets[g] <= offsets[g + 1], op << ": group " << g << "'s rows [" << offsets[g] << ", "
                                                 << offsets[g + 1] << ") run backwards");
}

void Backend::grouped_matmul_forward(const TensorView& out, const TensorView& inp,
                                     const std::vector<TensorView>& weights, const std::vector<int>& offsets, int C,
                                     int OC) {
  check_groups(weights, offsets, "grouped_matmul_forward");
  const size_t c = size_t(C), oc = size_t(OC);
  for (size_t g = 0; g < weights.size(); ++g) {
    const size_t r0 = size_t(offsets[g]), n = size_t(offsets[g + 1]) - r0;
    if (n > 0) matmul_forward(out.slice(r0 * oc, n * oc), inp.slice(r0 * c, n * c), weights[g], {}, int(n), C, OC);
  }
}

void Backend::grouped_matmul_backward_input(const TensorView& dinp, const TensorView& dout,
                                            const std::vector<TensorView>& weights, const std::vector<int>& offsets,
                                            int C, int OC) {
  check_groups(weights, offsets, "grouped_matmul_backward_input");
  const size_t c = size_t(C), oc = size_t(OC);
  for (size_t g = 0; g < weights.size(); ++g) {
    const size_t r0 = size_t(offsets[g]), n = size_t(offsets[g + 1]) - r0;
    if (n > 0) matmul_backward_input(dinp.slice(r0 * c, n * c), dout.slice(r0 * oc, n * oc), weights[g], int(n), C, OC);
  }
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
