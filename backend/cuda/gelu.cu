// GELU (tanh form) and its gradient, element-wise, through the scalar formulas the CPU uses.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(gelu_tanh(to_float(inp[i])));
}

// dinp may be dout: each element is read and then written by the same thread.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dinp[i] = from_float<T>(to_float(dout[i]) * gelu_tanh_grad(to_float(inp[i])));
}

// Enough blocks to fill the device a few times over; the grid-stride loops cover the rest.
unsigned int grid_for(const CudaContext& ctx, size_t n) {
  return std::min(blocks_for(n, kThreads), 32u * static_cast<unsigned int>(ctx.sm_count));
}

}  // namespace

void gelu_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, size_t n) {
  if (n == 0) return;
  dispatch_compute(dt, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<T*>(out),
                                                                          static_cast<const T*>(inp), n);
    FEAST_CUDA_LAUNCH_CHECK(gelu_forward_kernel);
  });
}

void gelu_backward(const CudaContext& ctx, DType dt, void* dinp, const void* inp, const void* dout, size_t n) {
  if (n == 0) return;
  dispatch_compute(dt, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
    FEAST_CUDA_LAUNCH_CHECK(gelu_backward_kernel);
  });
}

}  // namespace feast::cuda
