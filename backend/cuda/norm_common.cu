#include "backend/cuda/norm_common.cuh"

namespace feast::cuda {
namespace {

__global__ void add_column_partials_kernel(float* __restrict__ dst, const float* __restrict__ partials, int groups,
                                           int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int g = 0; g < groups; ++g) sum += partials[size_t(g) * C + c];
    dst[c] += sum;
  }
}

}  // namespace

void add_column_partials(const CudaContext& ctx, float* dst, const float* partials, int groups, int C) {
  add_column_partials_kernel<<<blocks_for(C, 256), 256, 0, ctx.stream>>>(dst, partials, groups, C);
  FEAST_CUDA_LAUNCH_CHECK(add_column_partials_kernel);
}

}  // namespace feast::cuda
