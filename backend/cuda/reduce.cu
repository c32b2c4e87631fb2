// Float64 sums of a float32 vector (the loss total, the gradient norm) that repeat bit for bit:
// a grid whose size depends only on n writes one partial per block into scratch, one block adds
// the partials, and every addition happens in an order fixed by the indices alone.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;
constexpr unsigned int kMaxBlocks = 1024;  // one thread of the final block per partial

template <bool kSquare>
__global__ void partial_sums_kernel(double* partials, const float* x, size_t n) {
  __shared__ double shared[32];
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  double s = 0.0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double xi = x[i];
    s += kSquare ? xi * xi : xi;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// One block of kMaxBlocks threads; thread i holds partial i (0 past `count`).
__global__ void final_sum_kernel(double* total, const double* partials, unsigned int count) {
  __shared__ double shared[32];
  double s = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *total = s;
}

// Enqueues the sum of x (or of its squares) into *total on the device. `partials` (kMaxBlocks
// doubles) may be reused by the next call: the stream runs them in order.
template <bool kSquare>
void enqueue_reduce(const CudaContext& ctx, double* total, double* partials, const float* x, size_t n) {
  if (n == 0) {
    FEAST_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(double), ctx.stream));
    return;
  }
  const unsigned int blocks = std::min(blocks_for(n, kThreads), kMaxBlocks);
  partial_sums_kernel<kSquare><<<blocks, kThreads, 0, ctx.stream>>>(partials, x, n);
  FEAST_CUDA_LAUNCH_CHECK(partial_sums_kernel);
  final_sum_kernel<<<1, kMaxBlocks, 0, ctx.stream>>>(total, partials, blocks);
  FEAST_CUDA_LAUNCH_CHECK(final_sum_kernel);
}

template <bool kSquare>
double reduce(const CudaContext& ctx, const float* x, size_t n) {
  if (n == 0) return 0.0;
  double* partials = ctx.scratch->get_as<double>(kMaxBlocks + 1);
  double* total = partials + kMaxBlocks;
  enqueue_reduce<kSquare>(ctx, total, partials, x, n);
  double result = 0.0;
  FEAST_CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, ctx.stream));
  FEAST_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  return result;
}

}  // namespace

double sum(const CudaContext& ctx, const float* x, size_t n) { return reduce<false>(ctx, x, n); }

double sum_of_squares(const CudaContext& ctx, const float* x, size_t n) { return reduce<true>(ctx, x, n); }

std::vector<double> sums_of_squares(const CudaContext& ctx, const std::vector<const float*>& parts,
                                    const std::vector<size_t>& counts) {
  std::vector<double> out(parts.size(), 0.0);
  if (parts.empty()) return out;
  // One scratch request: the partials, then a total per part.
  double* partials = ctx.scratch->get_as<double>(kMaxBlocks + parts.size());
  double* totals = partials + kMaxBlocks;
  for (size_t i = 0; i < parts.size(); ++i) enqueue_reduce<true>(ctx, totals + i, partials, parts[i], counts[i]);
  FEAST_CUDA_CHECK(cudaMemcpyAsync(out.data(), totals, out.size() * sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  FEAST_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  return out;
}

}  // namespace feast::cuda
