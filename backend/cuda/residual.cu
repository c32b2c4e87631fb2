// The residual connection: out = a + b element-wise (out may be a or b).
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;

// No __restrict__: out may alias a or b, and each element is read and written by one thread.
template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

}  // namespace

void add(const CudaContext& ctx, DType dt, void* out, const void* a, const void* b, size_t n) {
  if (n == 0) return;
  // Enough blocks to fill the device a few times over; the grid-stride loop covers the rest.
  const unsigned int grid = std::min(blocks_for(n, kThreads), 32u * static_cast<unsigned int>(ctx.sm_count));
  dispatch_compute(dt, "add", [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<grid, kThreads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                     static_cast<const T*>(b), n);
    FEAST_CUDA_LAUNCH_CHECK(add_kernel);
  });
}

}  // namespace feast::cuda
