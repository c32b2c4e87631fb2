// float32 <-> bfloat16 conversion (master weights -> compute parameters). The rounding is
// core/bfloat16.h's, the CPU's own, so both backends produce the same bits, NaNs included.
#include <algorithm>
#include <string>

#include "core/bfloat16.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;
constexpr unsigned int kBlocksPerSm = 8;

__global__ void float_to_bf16_kernel(uint16_t* out, const float* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = float_to_bf16(inp[i]);
}

__global__ void bf16_to_float_kernel(float* out, const uint16_t* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = bf16_to_float(inp[i]);
}

}  // namespace

void cast(const CudaContext& ctx, DType dst_dtype, void* dst, DType src_dtype, const void* src, size_t n) {
  if (dst_dtype == src_dtype) {
    if (n != 0)
      FEAST_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  const bool narrow = dst_dtype == DType::kBFloat16 && src_dtype == DType::kFloat32;
  const bool widen = dst_dtype == DType::kFloat32 && src_dtype == DType::kBFloat16;
  if (!narrow && !widen)
    throw Error(std::string("cuda cast: ") + dtype_name(src_dtype) + " to " + dtype_name(dst_dtype) +
                " is not supported");
  if (n == 0) return;
  const unsigned int blocks = std::min(blocks_for(n, kThreads), static_cast<unsigned int>(ctx.sm_count) * kBlocksPerSm);
  if (narrow) {
    float_to_bf16_kernel<<<blocks, kThreads, 0, ctx.stream>>>(static_cast<uint16_t*>(dst),
                                                               static_cast<const float*>(src), n);
    FEAST_CUDA_LAUNCH_CHECK(float_to_bf16_kernel);
  } else {
    bf16_to_float_kernel<<<blocks, kThreads, 0, ctx.stream>>>(static_cast<float*>(dst),
                                                               static_cast<const uint16_t*>(src), n);
    FEAST_CUDA_LAUNCH_CHECK(bf16_to_float_kernel);
  }
}

}  // namespace feast::cuda
