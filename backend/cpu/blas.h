// Row-major GEMM and GEMV for float and double through OpenBLAS (sgemm/dgemm/sgemv), so every CPU
// op can be instantiated in float64 for the finite-difference tests with the same code path. The
// library is opened with the kernels the CPU's features call for (blas_library.h).
#pragma once

#include <cblas.h>

#include "backend/cpu/blas_library.h"

namespace feast::cpu {

// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C; row-major with leading dims.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  blas_library().sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M,
                       N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  blas_library().dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M,
                       N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// y (M) = alpha * A (M, N) x + beta * y; row-major.
inline void gemv(int M, int N, float alpha, const float* A, int lda, const float* x, float beta, float* y) {
  blas_library().sgemv(CblasRowMajor, CblasNoTrans, M, N, alpha, A, lda, x, 1, beta, y, 1);
}

}  // namespace feast::cpu
