// Device-side helpers shared by the kernels in model/cuda/: loads and stores that convert the
// compute dtype (float or bfloat16) to and from float, warp and block reductions, grid sizing,
// and the dispatch from a runtime DType to the kernel template. Arithmetic is always float (or
// double for the deterministic sums); bfloat16 is only a storage format.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "backend/cuda/cublas_check.h"

namespace feast::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
// Round to nearest even, as the CPU's float_to_bf16 (core/bfloat16.h) rounds.
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ double warp_sum(double x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The sum over a block of blockDim.x threads (a multiple of 32, at most 1024), returned to every
// thread. `shared` holds 32 values. The order of additions is fixed, so results repeat.
template <typename V>
__device__ __forceinline__ V block_sum(V x, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  V total = lane < warps ? shared[lane] : V(0);
  return warp_sum(total);
}

__device__ __forceinline__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(m);
}

inline unsigned int blocks_for(size_t n, unsigned int threads) {
  return static_cast<unsigned int>((n + threads - 1) / threads);
}

// Calls f(T{}) with T the C++ type of `dt` (float or bf16): the launchers' dtype switch.
template <typename F>
void dispatch_compute(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(float{}); return;
    case DType::kBFloat16: f(bf16{}); return;
    default: throw Error(std::string("cuda ") + op + ": no kernel for " + dtype_name(dt));
  }
}

}  // namespace feast::cuda
