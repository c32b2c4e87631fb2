// Row-major GEMM for float and double through OpenBLAS (sgemm/dgemm), so every CPU op can be
// instantiated in float64 for the finite-difference tests with the same code path.
#pragma once

#include <cblas.h>

namespace feast::cpu {

// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C; row-major with leading dims.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace feast::cpu
