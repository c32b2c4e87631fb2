// SwiGLU: out (N, I) = silu(gate) * up of inp (N, 2I) = [gate | up], and its gradient, through
// the scalar formulas the CPU uses.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

// Blocks stride over rows and threads over a row's I columns, so no index is divided by I.
template <typename T>
__global__ void swiglu_forward_kernel(T* __restrict__ out, const T* __restrict__ inp, int N, int I) {
  for (size_t n = blockIdx.x; n < size_t(N); n += gridDim.x) {
    const T* gate = inp + n * 2 * I;
    const T* up = gate + I;
    T* o = out + n * I;
    for (int i = threadIdx.x; i < I; i += blockDim.x) o[i] = from_float<T>(silu(to_float(gate[i])) * to_float(up[i]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* __restrict__ dinp, const T* __restrict__ inp, const T* __restrict__ dout,
                                       int N, int I) {
  for (size_t n = blockIdx.x; n < size_t(N); n += gridDim.x) {
    const T* gate = inp + n * 2 * I;
    const T* up = gate + I;
    const T* d = dout + n * I;
    T* dgate = dinp + n * 2 * I;
    T* dup = dgate + I;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
      const float g = to_float(gate[i]), u = to_float(up[i]), dy = to_float(d[i]);
      dgate[i] = from_float<T>(dy * u * silu_grad(g));
      dup[i] = from_float<T>(dy * silu(g));
    }
  }
}

// A block per row of up to 256 columns (whole warps), and enough blocks to fill the device a
// few times over.
struct RowLaunch {
  unsigned int grid, threads;
};
RowLaunch row_launch(const CudaContext& ctx, int N, int I) {
  const unsigned int threads = std::min(256u, (static_cast<unsigned int>(I) + 31u) / 32u * 32u);
  const unsigned int grid = std::min(static_cast<unsigned int>(N), 32u * static_cast<unsigned int>(ctx.sm_count));
  return {grid, threads};
}

}  // namespace

void swiglu_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, int N, int I) {
  if (N <= 0 || I <= 0) return;
  const RowLaunch launch = row_launch(ctx, N, I);
  dispatch_compute(dt, "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<launch.grid, launch.threads, 0, ctx.stream>>>(static_cast<T*>(out),
                                                                             static_cast<const T*>(inp), N, I);
    FEAST_CUDA_LAUNCH_CHECK(swiglu_forward_kernel);
  });
}

void swiglu_backward(const CudaContext& ctx, DType dt, void* dinp, const void* inp, const void* dout, int N, int I) {
  if (N <= 0 || I <= 0) return;
  const RowLaunch launch = row_launch(ctx, N, I);
  dispatch_compute(dt, "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<launch.grid, launch.threads, 0, ctx.stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), N, I);
    FEAST_CUDA_LAUNCH_CHECK(swiglu_backward_kernel);
  });
}

}  // namespace feast::cuda
