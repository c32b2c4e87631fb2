// LoRA dropout (Backend::dropout_forward/backward; the mask: backend/dropout_mask.h, shared with
// the CPU): one thread per element, grid-stride. The scale 1 / (1 - p) is computed once on the
// host and passed in, so it is the CPU's float whatever the device's division.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/dropout_mask.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;

// kBackward: dinp += dout * keep * scale; else out = inp * keep * scale.
template <typename T, bool kBackward>
__global__ void dropout_kernel(T* out, const T* inp, DropoutShape s, float scale, size_t n) {
  for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += size_t(gridDim.x) * blockDim.x) {
    const int r = int(k / size_t(s.C)), c = int(k % size_t(s.C));
    const bool keep = dropout_keeps(s, r, c);
    if constexpr (kBackward) {
      if (keep) out[k] = from_float<T>(to_float(out[k]) + to_float(inp[k]) * scale);
    } else {
      out[k] = from_float<T>(keep ? to_float(inp[k]) * scale : 0.0f);
    }
  }
}

template <bool kBackward>
void launch_dropout(const CudaContext& ctx, DType dt, const char* op, void* out, const void* inp,
                    const DropoutShape& s) {
  const size_t n = size_t(s.N) * size_t(s.C);
  if (n == 0) return;
  const unsigned int grid = std::min(blocks_for(n, kThreads), 32u * static_cast<unsigned int>(ctx.sm_count));
  const float scale = dropout_scale(s.p);
  dispatch_compute(dt, op, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T, kBackward><<<grid, kThreads, 0, ctx.stream>>>(static_cast<T*>(out), static_cast<const T*>(inp),
                                                                    s, scale, n);
    FEAST_CUDA_LAUNCH_CHECK(dropout_kernel);
  });
}

}  // namespace

void dropout_forward(const CudaContext& ctx, DType dt, void* out, const void* inp, const DropoutShape& s) {
  launch_dropout<false>(ctx, dt, "dropout_forward", out, inp, s);
}

void dropout_backward(const CudaContext& ctx, DType dt, void* dinp, const void* dout, const DropoutShape& s) {
  launch_dropout<true>(ctx, dt, "dropout_backward", dinp, dout, s);
}

}  // namespace feast::cuda
