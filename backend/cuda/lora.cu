// LoRA's low-rank update (Backend::lora_forward/backward, model/lora.h) as five cublasGemmEx
// products with fp32 accumulation: the (N, r) intermediates are small, so plain cuBLAS serves;
// the adapter's output columns are addressed through the leading dimension, and the updates of
// the output and the input gradient are added by the products themselves (beta = 1). cuBLAS is
// column-major: a row-major (R, K) matrix is its (K, R) transpose, and each product below is
// written for the transposes. Gradients of A and B are float32 from compute-dtype operands.
#include <cublas_v2.h>

#include "backend/cuda/cublas_check.h"
#include "backend/cuda/kernel_common.cuh"
#include "backend/cuda/kernels.h"

namespace feast::cuda {
namespace {

cudaDataType_t operand_type(DType dt) { return dt == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F; }

// D (m, n, column-major, ld ldd) = alpha op(A) op(B) + beta D.
void gemm(const CudaContext& ctx, bool ta, bool tb, int m, int n, int k, float alpha, const void* A, int lda,
          const void* B, int ldb, float beta, void* D, int ldd, cudaDataType_t ab, cudaDataType_t d) {
  if (m == 0 || n == 0 || k == 0) return;  // k == 0 happens for no real shape (r >= 1, N >= 1)
  FEAST_CUBLAS_CHECK(cublasGemmEx(ctx.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                  &alpha, A, ab, lda, B, ab, ldb, &beta, D, d, ldd, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

// h^T (r, N) = scale · a (r, C) · inp^T (C, N).
void adapter_input(const CudaContext& ctx, cudaDataType_t t, void* h, const void* inp, const void* a,
                   const LoraShape& s) {
  gemm(ctx, true, false, s.r, s.N, s.C, s.scale, a, s.C, inp, s.C, 0.0f, h, s.r, t, t);
}

}  // namespace

void lora_forward(const CudaContext& ctx, DType dt, void* out, void* h, const void* inp, const void* a, const void* b,
                  const LoraShape& s) {
  const cudaDataType_t t = operand_type(dt);
  adapter_input(ctx, t, h, inp, a, s);
  // out[:, col:col+OC]^T (OC, N) += b (OC, r) · h^T (r, N).
  void* cols = static_cast<char*>(out) + size_t(s.col) * dtype_size(dt);
  gemm(ctx, true, false, s.OC, s.N, s.r, 1.0f, b, s.r, h, s.r, 1.0f, cols, s.out_ld, t, t);
}

void lora_backward(const CudaContext& ctx, DType dt, void* dinp, float* da, float* db, void* h, void* dh,
                   const void* dout, const void* inp, const void* a, const void* b, const LoraShape& s) {
  const cudaDataType_t t = operand_type(dt);
  const void* g = static_cast<const char*>(dout) + size_t(s.col) * dtype_size(dt);
  adapter_input(ctx, t, h, inp, a, s);
  // db^T (r, OC) += h^T (r, N) · g (N, OC).
  gemm(ctx, false, true, s.r, s.OC, s.N, 1.0f, h, s.r, g, s.out_ld, 1.0f, db, s.r, t, CUDA_R_32F);
  // dh^T (r, N) = scale · b^T (r, OC) · g^T (OC, N).
  gemm(ctx, false, false, s.r, s.N, s.OC, s.scale, b, s.r, g, s.out_ld, 0.0f, dh, s.r, t, t);
  // da^T (C, r) += inp^T (C, N) · dh (N, r).
  gemm(ctx, false, true, s.C, s.r, s.N, 1.0f, inp, s.C, dh, s.r, 1.0f, da, s.C, t, CUDA_R_32F);
  // dinp^T (C, N) += a^T (C, r) · dh^T (r, N).
  if (dinp) gemm(ctx, false, false, s.C, s.N, s.r, 1.0f, a, s.C, dh, s.r, 1.0f, dinp, s.C, t, t);
}

}  // namespace feast::cuda
