// A mixture of experts' ops on the GPU (Backend::moe_*; the CPU's backend/cpu/moe.h is the
// reference). The router runs a thread per token (a router has tens of experts, and top-k is k
// scans of them); the probabilities' column sums a block per expert in a fixed order; the row
// moves a thread per element, each output element gathered from its terms in choice order, so
// every result repeats bit for bit.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/moe_route.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;

template <typename T>
__global__ void route_kernel(float* probs, float* lse, int32_t* expert, float* weight, const T* logits, int N, int E,
                             int k, bool renormalize) {
  const int n = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (n >= N) return;
  const T* x = logits + size_t(n) * size_t(E);
  float* p = probs + size_t(n) * size_t(E);
  float max = to_float(x[0]);
  for (int e = 1; e < E; ++e) max = fmaxf(max, to_float(x[e]));
  float sum = 0;
  for (int e = 0; e < E; ++e) {
    p[e] = expf(to_float(x[e]) - max);
    sum += p[e];
  }
  for (int e = 0; e < E; ++e) p[e] /= sum;
  lse[n] = max + logf(sum);
  moe_top_k(p, E, k, renormalize, expert + size_t(n) * size_t(k), weight + size_t(n) * size_t(k));
}

// prob_sum[e] = the probabilities of expert e summed over rows: block e, a fixed order (0 for no
// rows, as the CPU's).
__global__ void column_sum_kernel(float* prob_sum, const float* probs, int N, int E) {
  __shared__ double shared[32];
  const int e = int(blockIdx.x);
  double s = 0;
  for (int n = int(threadIdx.x); n < N; n += int(blockDim.x)) s += probs[size_t(n) * size_t(E) + size_t(e)];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) prob_sum[e] = float(s);
}

template <typename T>
__global__ void route_backward_kernel(T* dlogits, const float* probs, const float* lse, const int32_t* expert,
                                      const float* weight, const float* dweight, const float* dprob, float z_scale,
                                      int N, int E, int k, bool renormalize) {
  const int n = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (n >= N) return;
  const size_t rk = size_t(n) * size_t(k);
  moe_route_grad_row(dlogits + size_t(n) * size_t(E), probs + size_t(n) * size_t(E), lse[n], expert + rk, weight + rk,
                     dweight + rk, dprob, z_scale, E, k, renormalize);
}

template <typename T>
__global__ void gather_kernel(T* rows, const T* inp, const int32_t* token, int M, int C) {
  const size_t total = size_t(M) * size_t(C);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t m = i / size_t(C), c = i % size_t(C);
    rows[i] = inp[size_t(token[m]) * size_t(C) + c];
  }
}

template <typename T>
__global__ void gather_backward_kernel(T* dinp, const T* drows, const int32_t* slot, int N, int k, int C) {
  const size_t total = size_t(N) * size_t(C);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t n = i / size_t(C), c = i % size_t(C);
    float acc = to_float(dinp[i]);
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[n * size_t(k) + size_t(j)];
      if (s >= 0) acc += to_float(drows[size_t(s) * size_t(C) + c]);
    }
    dinp[i] = from_float<T>(acc);
  }
}

template <typename T>
__global__ void combine_kernel(T* out, const T* rows, const int32_t* slot, const float* weight, int N, int k, int C) {
  const size_t total = size_t(N) * size_t(C);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t n = i / size_t(C), c = i % size_t(C);
    float acc = to_float(out[i]);
    for (int j = 0; j < k; ++j) {
      const size_t at = n * size_t(k) + size_t(j);
      if (slot[at] >= 0) acc += weight[at] * to_float(rows[size_t(slot[at]) * size_t(C) + c]);
    }
    out[i] = from_float<T>(acc);
  }
}

// drows row slot[n, j] = weight[n, j] * dout row n: a thread per element of the choices' rows.
template <typename T>
__global__ void combine_backward_rows_kernel(T* drows, const T* dout, const int32_t* slot, const float* weight, int N,
                                             int k, int C) {
  const size_t total = size_t(N) * size_t(k) * size_t(C);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t choice = i / size_t(C), c = i % size_t(C), n = choice / size_t(k);
    const int32_t s = slot[choice];
    if (s >= 0) drows[size_t(s) * size_t(C) + c] = from_float<T>(weight[choice] * to_float(dout[n * size_t(C) + c]));
  }
}

// dweight[n, j] = dout row n . rows row slot[n, j]: a warp per choice, lanes over channels.
template <typename T>
__global__ void combine_backward_weight_kernel(float* dweight, const T* dout, const T* rows, const int32_t* slot,
                                               int N, int k, int C) {
  const size_t choice = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = int(threadIdx.x % 32);
  if (choice >= size_t(N) * size_t(k)) return;
  const int32_t s = slot[choice];
  float acc = 0;
  if (s >= 0) {
    const T* g = dout + (choice / size_t(k)) * size_t(C);
    const T* r = rows + size_t(s) * size_t(C);
    for (int c = lane; c < C; c += 32) acc += to_float(g[c]) * to_float(r[c]);
  }
  acc = warp_sum(acc);
  if (lane == 0) dweight[choice] = acc;
}

template <typename T>
__global__ void shared_gate_kernel(float* gate, const T* logits, int N) {
  const int n = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (n < N) gate[n] = 1.0f / (1.0f + expf(-to_float(logits[n])));
}

template <typename T>
__global__ void shared_gate_backward_kernel(T* dlogits, const float* gate, const float* dgate, int N) {
  const int n = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (n < N) dlogits[n] = from_float<T>(dgate[n] * gate[n] * (1.0f - gate[n]));
}

unsigned int grid_for(const CudaContext& ctx, size_t n) {
  return std::max(1u, std::min(blocks_for(n, kThreads), 32u * static_cast<unsigned int>(ctx.sm_count)));
}

}  // namespace

void moe_route(const CudaContext& ctx, DType dt, float* probs, float* lse, int32_t* expert, float* weight,
               float* prob_sum, const void* logits, int N, int E, int k, bool renormalize) {
  if (N > 0)
    dispatch_compute(dt, "moe_route", [&](auto tag) {
      using T = decltype(tag);
      route_kernel<T><<<blocks_for(size_t(N), kThreads), kThreads, 0, ctx.stream>>>(
          probs, lse, expert, weight, static_cast<const T*>(logits), N, E, k, renormalize);
      FEAST_CUDA_LAUNCH_CHECK(route_kernel);
    });
  column_sum_kernel<<<unsigned(E), kThreads, 0, ctx.stream>>>(prob_sum, probs, N, E);
  FEAST_CUDA_LAUNCH_CHECK(column_sum_kernel);
}

void moe_route_backward(const CudaContext& ctx, DType dt, void* dlogits, const float* probs, const float* lse,
                        const int32_t* expert, const float* weight, const float* dweight, const float* dprob,
                        float z_scale, int N, int E, int k, bool renormalize) {
  if (N == 0) return;
  dispatch_compute(dt, "moe_route_backward", [&](auto tag) {
    using T = decltype(tag);
    route_backward_kernel<T><<<blocks_for(size_t(N), kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(dlogits), probs, lse, expert, weight, dweight, dprob, z_scale, N, E, k, renormalize);
    FEAST_CUDA_LAUNCH_CHECK(route_backward_kernel);
  });
}

void moe_gather(const CudaContext& ctx, DType dt, void* rows, const void* inp, const int32_t* token, int M, int C) {
  if (M == 0) return;
  dispatch_compute(dt, "moe_gather", [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<grid_for(ctx, size_t(M) * size_t(C)), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(rows), static_cast<const T*>(inp), token, M, C);
    FEAST_CUDA_LAUNCH_CHECK(gather_kernel);
  });
}

void moe_gather_backward(const CudaContext& ctx, DType dt, void* dinp, const void* drows, const int32_t* slot, int N,
                         int k, int C) {
  if (N == 0) return;
  dispatch_compute(dt, "moe_gather_backward", [&](auto tag) {
    using T = decltype(tag);
    gather_backward_kernel<T><<<grid_for(ctx, size_t(N) * size_t(C)), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(drows), slot, N, k, C);
    FEAST_CUDA_LAUNCH_CHECK(gather_backward_kernel);
  });
}

void moe_combine(const CudaContext& ctx, DType dt, void* out, const void* rows, const int32_t* slot,
                 const float* weight, int N, int k, int C) {
  if (N == 0) return;
  dispatch_compute(dt, "moe_combine", [&](auto tag) {
    using T = decltype(tag);
    combine_kernel<T><<<grid_for(ctx, size_t(N) * size_t(C)), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(out), static_cast<const T*>(rows), slot, weight, N, k, C);
    FEAST_CUDA_LAUNCH_CHECK(combine_kernel);
  });
}

void moe_combine_backward(const CudaContext& ctx, DType dt, void* drows, float* dweight, const void* dout,
                          const void* rows, const int32_t* slot, const float* weight, int N, int k, int C) {
  if (N == 0) return;
  dispatch_compute(dt, "moe_combine_backward", [&](auto tag) {
    using T = decltype(tag);
    combine_backward_rows_kernel<T><<<grid_for(ctx, size_t(N) * size_t(k) * size_t(C)), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(drows), static_cast<const T*>(dout), slot, weight, N, k, C);
    FEAST_CUDA_LAUNCH_CHECK(combine_backward_rows_kernel);
    combine_backward_weight_kernel<T><<<blocks_for(size_t(N) * size_t(k) * 32, kThreads), kThreads, 0, ctx.stream>>>(
        dweight, static_cast<const T*>(dout), static_cast<const T*>(rows), slot, N, k, C);
    FEAST_CUDA_LAUNCH_CHECK(combine_backward_weight_kernel);
  });
}

void moe_shared_gate(const CudaContext& ctx, DType dt, float* gate, const void* logits, int N) {
  if (N == 0) return;
  dispatch_compute(dt, "moe_shared_gate", [&](auto tag) {
    using T = decltype(tag);
    shared_gate_kernel<T><<<blocks_for(size_t(N), kThreads), kThreads, 0, ctx.stream>>>(
        gate, static_cast<const T*>(logits), N);
    FEAST_CUDA_LAUNCH_CHECK(shared_gate_kernel);
  });
}

void moe_shared_gate_backward(const CudaContext& ctx, DType dt, void* dlogits, const float* gate, const float* dgate,
                              int N) {
  if (N == 0) return;
  dispatch_compute(dt, "moe_shared_gate_backward", [&](auto tag) {
    using T = decltype(tag);
    shared_gate_backward_kernel<T><<<blocks_for(size_t(N), kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(dlogits), gate, dgate, N);
    FEAST_CUDA_LAUNCH_CHECK(shared_gate_backward_kernel);
  });
}

}  // namespace feast::cuda
