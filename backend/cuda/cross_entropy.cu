// Vocab-parallel cross-entropy in three phases (backend/backend.h; CPU reference
// backend/cpu/cross_entropy.cpp): one block per row of logits, the row's columns split over the
// block's threads. Logits are in the compute dtype; row_max, sum_exp, target_logit and losses are
// float, and all arithmetic is float.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr int kThreads = 512;

// Local columns that are real vocabulary entries: [0, real); the rest of a row is padding.
int real_columns(int Vl, int vocab_begin, int V) { return std::clamp(V - vocab_begin, 0, Vl); }

template <typename T>
__global__ void row_max_kernel(float* row_max, const T* logits, int Vl, int real) {
  __shared__ float shared[32];
  const T* row = logits + static_cast<size_t>(blockIdx.x) * Vl;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < real; v += blockDim.x) mx = fmaxf(mx, to_float(row[v]));
  mx = block_max(mx, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

template <typename T>
__global__ void partials_kernel(float* sum_exp, float* target_logit, T* logits, const float* row_max,
                                const int32_t* targets, int Vl, int vocab_begin, int real, bool keep_exp) {
  __shared__ float shared[32];
  const int n = blockIdx.x;
  T* row = logits + static_cast<size_t>(n) * Vl;
  if (threadIdx.x == 0) {
    const int local = targets[n] - vocab_begin;
    target_logit[n] = local >= 0 && local < real ? to_float(row[local]) : 0.0f;
  }
  __syncthreads();  // the target's logit is read before keep_exp overwrites it
  const float mx = row_max[n];
  float sum = 0.0f;
  for (int v = threadIdx.x; v < real; v += blockDim.x) {
    const float e = fast_exp(to_float(row[v]) - mx);
    if (keep_exp) row[v] = from_float<T>(e);
    sum += e;  // the unrounded exp, so the loss does not depend on keep_exp
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) sum_exp[n] = sum;
}

// `logits` holds exp(logit - row_max) from the partials phase (with keep_exp) when dloss != 0.
template <typename T>
__global__ void finish_kernel(T* logits, float* losses, const float* row_max, const float* sum_exp,
                              const float* target_logit, const int32_t* targets, int Vl, int vocab_begin,
                              int real, float dloss) {
  const int n = blockIdx.x;
  T* row = logits + static_cast<size_t>(n) * Vl;
  if (targets[n] < 0) {  // an ignored target (a prompt token under a loss mask): no loss, no gradient
    if (threadIdx.x == 0) losses[n] = 0.0f;
    if (dloss != 0.0f)
      for (int v = threadIdx.x; v < Vl; v += blockDim.x) row[v] = from_float<T>(0.0f);
    return;
  }
  if (threadIdx.x == 0) losses[n] = row_max[n] + logf(sum_exp[n]) - target_logit[n];
  if (dloss == 0.0f) return;
  const float scale = dloss / sum_exp[n];
  const int local = targets[n] - vocab_begin;  // outside [0, real) when another rank holds the target
  for (int v = threadIdx.x; v < Vl; v += blockDim.x) {
    float grad = 0.0f;  // padding columns get no gradient
    if (v < real) {
      grad = to_float(row[v]) * scale;
      if (v == local) grad -= dloss;
    }
    row[v] = from_float<T>(grad);
  }
}

}  // namespace

void cross_entropy_row_max(const CudaContext& ctx, DType dt, float* row_max, const void* logits, int N, int Vl,
                           int vocab_begin, int V) {
  if (N == 0) return;
  const int real = real_columns(Vl, vocab_begin, V);
  dispatch_compute(dt, "cross_entropy_row_max", [&](auto tag) {
    using T = decltype(tag);
    row_max_kernel<T><<<N, kThreads, 0, ctx.stream>>>(row_max, static_cast<const T*>(logits), Vl, real);
    FEAST_CUDA_LAUNCH_CHECK(row_max_kernel);
  });
}

void cross_entropy_partials(const CudaContext& ctx, DType dt, float* sum_exp, float* target_logit, void* logits,
                            const float* row_max, const int32_t* targets, int N, int Vl, int vocab_begin, int V,
                            bool keep_exp) {
  if (N == 0) return;
  const int real = real_columns(Vl, vocab_begin, V);
  dispatch_compute(dt, "cross_entropy_partials", [&](auto tag) {
    using T = decltype(tag);
    partials_kernel<T><<<N, kThreads, 0, ctx.stream>>>(sum_exp, target_logit, static_cast<T*>(logits), row_max,
                                                       targets, Vl, vocab_begin, real, keep_exp);
    FEAST_CUDA_LAUNCH_CHECK(partials_kernel);
  });
}

void cross_entropy_finish(const CudaContext& ctx, DType dt, void* logits, float* losses, const float* row_max,
                          const float* sum_exp, const float* target_logit, const int32_t* targets, int N, int Vl,
                          int vocab_begin, int V, float dloss) {
  if (N == 0) return;
  const int real = real_columns(Vl, vocab_begin, V);
  dispatch_compute(dt, "cross_entropy_finish", [&](auto tag) {
    using T = decltype(tag);
    finish_kernel<T><<<N, kThreads, 0, ctx.stream>>>(static_cast<T*>(logits), losses, row_max, sum_exp,
                                                      target_logit, targets, Vl, vocab_begin, real, dloss);
    FEAST_CUDA_LAUNCH_CHECK(finish_kernel);
  });
}

}  // namespace feast::cuda
