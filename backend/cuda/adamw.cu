// The fused AdamW step: each element's update is feast::adamw_update (backend/scalar_math.h), the
// same function the CPU backend calls, on grads * grad_scale.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;
constexpr unsigned int kBlocksPerSm = 8;

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, size_t n, AdamWStep step,
                             float grad_scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float p = params[i], mi = m[i], vi = v[i];
    adamw_update(p, mi, vi, grads[i] * grad_scale, step);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw_step(const CudaContext& ctx, float* params, float* m, float* v, const float* grads, size_t n,
                const AdamWStep& step, float grad_scale) {
  if (n == 0) return;
  const unsigned int blocks = std::min(blocks_for(n, kThreads), static_cast<unsigned int>(ctx.sm_count) * kBlocksPerSm);
  adamw_kernel<<<blocks, kThreads, 0, ctx.stream>>>(params, m, v, grads, n, step, grad_scale);
  FEAST_CUDA_LAUNCH_CHECK(adamw_kernel);
}

}  // namespace feast::cuda
