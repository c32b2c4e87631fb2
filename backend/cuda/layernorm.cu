// LayerNorm over the C channels of each row, and its gradient. A block normalises a row; the
// parameter gradients are column sums over the N rows, summed in a fixed order in two stages
// (per row-group partial sums in scratch, then the sum of the partials), so no atomics are
// needed and the result is the same every run.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/norm_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

// Two passes over the row (mean, then the variance about it) as the CPU does: no cancellation
// from E[x^2] - E[x]^2.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    layernorm_forward_kernel(T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             const T* __restrict__ inp, const T* __restrict__ weight, const T* __restrict__ bias, int C,
                             float eps) {
  __shared__ float shared[32];
  const size_t off = size_t(blockIdx.x) * C;
  const T* x = inp + off;
  T* y = out + off;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) sum += to_float(x[c]);
  const float m = block_sum(sum, shared) / float(C);
  float squares = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = to_float(x[c]) - m;
    squares += d * d;
  }
  const float var = block_sum(squares, shared) / float(C);
  const float r = 1.0f / sqrtf(var + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    y[c] = from_float<T>((to_float(x[c]) - m) * r * to_float(weight[c]) + to_float(bias[c]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = r;
  }
}

// dinp += the input gradient of one row per block. Each element is read and written by the
// same thread.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    layernorm_backward_input_kernel(T* __restrict__ dinp, const T* __restrict__ dout, const T* __restrict__ inp,
                                    const T* __restrict__ weight, const float* __restrict__ mean,
                                    const float* __restrict__ rstd, int C) {
  __shared__ float shared[32];
  const size_t off = size_t(blockIdx.x) * C;
  const T* x = inp + off;
  const T* dy = dout + off;
  T* dx = dinp + off;
  const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (to_float(x[c]) - m) * r;
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = block_sum(dnorm_sum, shared) / float(C);
  const float dnorm_norm_mean = block_sum(dnorm_norm_sum, shared) / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (to_float(x[c]) - m) * r;
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    dx[c] = from_float<T>(to_float(dx[c]) + r * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
  }
}

// Stage 1 of the parameter gradients: block (chunk, group) sums the rows of row group `group`
// for the kColumns channels of its chunk. A warp reads kColumns consecutive channels of a row
// (coalesced); the block's kRowLanes warps take every kRowLanes-th row and their sums are added
// in lane order. The group's sums go to row `group` of the (groups, C) partials.

template <typename T>
__global__ void layernorm_param_partials_kernel(float* __restrict__ dweight_partials,
                                                float* __restrict__ dbias_partials, const T* __restrict__ dout,
                                                const T* __restrict__ inp, const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int N, int C, int rows_per_group) {
  __shared__ float dweight_lanes[kRowLanes][kColumns];
  __shared__ float dbias_lanes[kRowLanes][kColumns];
  const int c = blockIdx.x * kColumns + threadIdx.x;
  const int group = blockIdx.y;
  const int row_begin = group * rows_per_group;
  const int row_end = row_begin + min(rows_per_group, N - row_begin);  // no int overflow near N
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int n = row_begin + threadIdx.y; n < row_end; n += kRowLanes) {
      const size_t i = size_t(n) * C + c;
      const float dy = to_float(dout[i]);
      dw += dy * (to_float(inp[i]) - mean[n]) * rstd[n];
      db += dy;
    }
  }
  dweight_lanes[threadIdx.y][threadIdx.x] = dw;
  dbias_lanes[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float dw_total = 0.0f, db_total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) {
      dw_total += dweight_lanes[lane][threadIdx.x];
      db_total += dbias_lanes[lane][threadIdx.x];
    }
    dweight_partials[size_t(group) * C + c] = dw_total;
    dbias_partials[size_t(group) * C + c] = db_total;
  }
}

}  // namespace

void layernorm_forward(const CudaContext& ctx, DType dt, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int N, int C, float eps) {
  if (N <= 0 || C <= 0) return;
  dispatch_compute(dt, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<N, row_threads(C), 0, ctx.stream>>>(
        static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp), static_cast<const T*>(weight),
        static_cast<const T*>(bias), C, eps);
    FEAST_CUDA_LAUNCH_CHECK(layernorm_forward_kernel);
  });
}

void layernorm_backward(const CudaContext& ctx, DType dt, void* dinp, float* dweight, float* dbias, const void* dout,
                        const void* inp, const void* weight, const float* mean, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const ColumnSumSplit split = column_sum_split(N, C);
  const int groups = split.groups;
  // One get(): the scratch buffer is shared, and a second get() may hand out the same memory.
  float* dweight_partials = ctx.scratch->get_as<float>(2 * size_t(groups) * C);
  float* dbias_partials = dweight_partials + size_t(groups) * C;
  dispatch_compute(dt, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* dout_t = static_cast<const T*>(dout);
    const T* inp_t = static_cast<const T*>(inp);
    layernorm_backward_input_kernel<T><<<N, row_threads(C), 0, ctx.stream>>>(
        static_cast<T*>(dinp), dout_t, inp_t, static_cast<const T*>(weight), mean, rstd, C);
    FEAST_CUDA_LAUNCH_CHECK(layernorm_backward_input_kernel);
    layernorm_param_partials_kernel<T><<<dim3(split.chunks, unsigned(groups)), dim3(kColumns, kRowLanes), 0, ctx.stream>>>(
        dweight_partials, dbias_partials, dout_t, inp_t, mean, rstd, N, C, split.rows_per_group);
    FEAST_CUDA_LAUNCH_CHECK(layernorm_param_partials_kernel);
  });
  add_column_partials(ctx, dweight, dweight_partials, groups, C);
  add_column_partials(ctx, dbias, dbias_partials, groups, C);
}

}  // namespace feast::cuda
