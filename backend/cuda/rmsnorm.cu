// RMSNorm over the C channels of each row, and its gradient. A block normalises a row; the
// weight's gradient is a column sum over the N rows, summed in a fixed order in two stages
// (per row-group partial sums in scratch, then the sum of the partials), so no atomics are
// needed and the result is the same every run.
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/norm_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_forward_kernel(T* __restrict__ out, float* __restrict__ rstd, const T* __restrict__ inp,
                           const T* __restrict__ weight, int C, float eps) {
  __shared__ float shared[32];
  const size_t off = size_t(blockIdx.x) * C;
  const T* x = inp + off;
  T* y = out + off;
  float squares = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = to_float(x[c]);
    squares += v * v;
  }
  const float r = 1.0f / sqrtf(block_sum(squares, shared) / float(C) + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = from_float<T>(to_float(x[c]) * r * to_float(weight[c]));
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// dinp += the input gradient of one row per block: with n = x r and g = dy w,
// dx = r (g - n mean(g n)). Each element is read and written by the same thread.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    rmsnorm_backward_input_kernel(T* __restrict__ dinp, const T* __restrict__ dout, const T* __restrict__ inp,
                                  const T* __restrict__ weight, const float* __restrict__ rstd, int C) {
  __shared__ float shared[32];
  const size_t off = size_t(blockIdx.x) * C;
  const T* x = inp + off;
  const T* dy = dout + off;
  T* dx = dinp + off;
  const float r = rstd[blockIdx.x];
  float dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dot += to_float(dy[c]) * to_float(weight[c]) * to_float(x[c]) * r;
  const float dot_mean = block_sum(dot, shared) / float(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xc = to_float(x[c]);
    dx[c] = from_float<T>(to_float(dx[c]) + r * (to_float(dy[c]) * to_float(weight[c]) - xc * r * dot_mean));
  }
}

// Stage 1 of the weight's gradient: block (chunk, group) sums the rows of row group `group` for
// the kColumns channels of its chunk. A warp reads kColumns consecutive channels of a row
// (coalesced); the block's kRowLanes warps take every kRowLanes-th row and their sums are added
// in lane order. The group's sums go to row `group` of the (groups, C) partials.

template <typename T>
__global__ void rmsnorm_weight_partials_kernel(float* __restrict__ dweight_partials, const T* __restrict__ dout,
                                               const T* __restrict__ inp, const float* __restrict__ rstd, int N,
                                               int C, int rows_per_group) {
  __shared__ float dweight_lanes[kRowLanes][kColumns];
  const int c = blockIdx.x * kColumns + threadIdx.x;
  const int group = blockIdx.y;
  const int row_begin = group * rows_per_group;
  const int row_end = row_begin + min(rows_per_group, N - row_begin);  // no int overflow near N
  float dw = 0.0f;
  if (c < C) {
    for (int n = row_begin + threadIdx.y; n < row_end; n += kRowLanes) {
      const size_t i = size_t(n) * C + c;
      dw += to_float(dout[i]) * to_float(inp[i]) * rstd[n];
    }
  }
  dweight_lanes[threadIdx.y][threadIdx.x] = dw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += dweight_lanes[lane][threadIdx.x];
    dweight_partials[size_t(group) * C + c] = total;
  }
}

}  // namespace

void rmsnorm_forward(const CudaContext& ctx, DType dt, void* out, float* rstd, const void* inp, const void* weight,
                     int N, int C, float eps) {
  if (N <= 0 || C <= 0) return;
  dispatch_compute(dt, "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_forward_kernel<T><<<N, row_threads(C), 0, ctx.stream>>>(
        static_cast<T*>(out), rstd, static_cast<const T*>(inp), static_cast<const T*>(weight), C, eps);
    FEAST_CUDA_LAUNCH_CHECK(rmsnorm_forward_kernel);
  });
}

void rmsnorm_backward(const CudaContext& ctx, DType dt, void* dinp, float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const ColumnSumSplit split = column_sum_split(N, C);
  const int groups = split.groups;
  float* dweight_partials = ctx.scratch->get_as<float>(size_t(groups) * C);
  dispatch_compute(dt, "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* dout_t = static_cast<const T*>(dout);
    const T* inp_t = static_cast<const T*>(inp);
    rmsnorm_backward_input_kernel<T><<<N, row_threads(C), 0, ctx.stream>>>(
        static_cast<T*>(dinp), dout_t, inp_t, static_cast<const T*>(weight), rstd, C);
    FEAST_CUDA_LAUNCH_CHECK(rmsnorm_backward_input_kernel);
    rmsnorm_weight_partials_kernel<T><<<dim3(split.chunks, unsigned(groups)), dim3(kColumns, kRowLanes), 0, ctx.stream>>>(
        dweight_partials, dout_t, inp_t, rstd, N, C, split.rows_per_group);
    FEAST_CUDA_LAUNCH_CHECK(rmsnorm_weight_partials_kernel);
  });
  add_column_partials(ctx, dweight, dweight_partials, groups, C);
}

}  // namespace feast::cuda
