// Dequantization of a 4-bit NormalFloat piece (Backend::dequantize_nf4; backend/nf4.h): one
// thread per element, grid-stride, through nf4.h's code and double-quantized scale (no fused
// multiply-add), so every backend dequantizes to the same values.
#include <algorithm>

#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/nf4.h"

namespace feast::cuda {
namespace {

constexpr unsigned int kThreads = 256;

struct CodeBook {
  float v[16];
};

template <typename T, bool kDoubleQuant>
__global__ void dequantize_nf4_kernel(T* out, const uint8_t* codes, const float* absmax, const uint8_t* scale_codes,
                                      const float* absmax2, const float* scale_code, float offset, CodeBook book,
                                      int64_t row0, int64_t col0, int64_t width, int cols, int scales_per_row,
                                      size_t n) {
  for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += size_t(gridDim.x) * blockDim.x) {
    const int64_t i = int64_t(k / size_t(cols)), j = int64_t(k % size_t(cols));
    const int64_t first = (row0 + i) * width + col0;
    const int64_t block = (first + j) / kNf4BlockSize;
    const size_t slot = size_t(i) * size_t(scales_per_row) + size_t(block - first / kNf4BlockSize);
    float scale;
    if constexpr (kDoubleQuant)
      scale = nf4_double_quant_scale(scale_code[scale_codes[slot]], absmax2[block / kNf4GroupSize], offset);
    else
      scale = absmax[slot];
    out[k] = from_float<T>(__fmul_rn(book.v[nf4_code_at(codes, k)], scale));
  }
}

}  // namespace

void dequantize_nf4(const CudaContext& ctx, DType dt, void* out, const Nf4Piece& p) {
  const size_t n = size_t(p.rows) * size_t(p.cols);
  if (n == 0) return;
  CodeBook book;
  std::copy(nf4_code_book().begin(), nf4_code_book().end(), book.v);
  const unsigned int grid = std::min(blocks_for(n, kThreads), 32u * static_cast<unsigned int>(ctx.sm_count));
  const auto* codes = static_cast<const uint8_t*>(p.codes.data);
  dispatch_compute(dt, "dequantize_nf4", [&](auto tag) {
    using T = decltype(tag);
    if (p.double_quant()) {
      dequantize_nf4_kernel<T, true><<<grid, kThreads, 0, ctx.stream>>>(
          static_cast<T*>(out), codes, nullptr, static_cast<const uint8_t*>(p.scales.data),
          static_cast<const float*>(p.absmax2.data), static_cast<const float*>(p.scale_code.data), p.offset, book,
          p.row0, p.col0, p.width, p.cols, p.scales_per_row, n);
      FEAST_CUDA_LAUNCH_CHECK(dequantize_nf4_kernel);
    } else {
      dequantize_nf4_kernel<T, false><<<grid, kThreads, 0, ctx.stream>>>(
          static_cast<T*>(out), codes, static_cast<const float*>(p.scales.data), nullptr, nullptr, nullptr, 0.0f,
          book, p.row0, p.col0, p.width, p.cols, p.scales_per_row, n);
      FEAST_CUDA_LAUNCH_CHECK(dequantize_nf4_kernel);
    }
  });
}

}  // namespace feast::cuda
