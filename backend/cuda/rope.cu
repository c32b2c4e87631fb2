// Rotary embedding in place on the q and k heads of each qkv row (backend/backend.h; CPU reference
// backend/cpu/rope.cpp): Hugging Face's rotate-half, a thread per rotated pair (x_i, x_{i + hs/2}).
// The backward rotates the gradient by the opposite angle. cos and sin are float (maxT, hs/2),
// read at the row's position t = row % T, or its document position when positions are given.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr int kThreads = 256;

// sign = +1 rotates forward, -1 back. n = B T (NH + NKV) hs/2 pairs; heads = NH + NKV, the q and
// k heads at the start of each row of width W.
template <typename T>
__global__ void rotate_kernel(T* qkv, const float* cos, const float* sin, const int32_t* positions, size_t n, int Tn,
                              int heads, int hs, int W, float sign) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int half = hs / 2;
  const int i = static_cast<int>(idx % half);
  const size_t head_row = idx / half;  // (bt, head)
  const int head = static_cast<int>(head_row % heads);
  const size_t bt = head_row / heads;
  const int t = positions ? positions[bt] : static_cast<int>(bt % Tn);
  T* x = qkv + bt * W + static_cast<size_t>(head) * hs;
  const float c = cos[static_cast<size_t>(t) * half + i], s = sign * sin[static_cast<size_t>(t) * half + i];
  const float a = to_float(x[i]), b = to_float(x[i + half]);
  x[i] = from_float<T>(a * c - b * s);
  x[i + half] = from_float<T>(b * c + a * s);
}

void rotate(const CudaContext& ctx, DType dt, const char* op, void* qkv, const float* cos, const float* sin,
            const int32_t* positions, int B, int T, int n_head, int n_kv_head, int head_dim, float sign) {
  const int heads = n_head + n_kv_head, W = (n_head + 2 * n_kv_head) * head_dim;
  const size_t n = static_cast<size_t>(B) * T * heads * (head_dim / 2);
  if (n == 0) return;
  dispatch_compute(dt, op, [&](auto tag) {
    using Dt = decltype(tag);
    rotate_kernel<Dt><<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(static_cast<Dt*>(qkv), cos, sin, positions,
                                                                            n, T, heads, head_dim, W, sign);
    FEAST_CUDA_LAUNCH_CHECK(rotate_kernel);
  });
}

}  // namespace

void rope_forward(const CudaContext& ctx, DType dt, void* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int B, int T, int n_head, int n_kv_head, int head_dim) {
  rotate(ctx, dt, "rope_forward", qkv, cos, sin, positions, B, T, n_head, n_kv_head, head_dim, 1.0f);
}

void rope_backward(const CudaContext& ctx, DType dt, void* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int B, int T, int n_head, int n_kv_head, int head_dim) {
  rotate(ctx, dt, "rope_backward", dqkv, cos, sin, positions, B, T, n_head, n_kv_head, head_dim, -1.0f);
}

}  // namespace feast::cuda
