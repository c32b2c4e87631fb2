// Row-major GEMM and GEMV for float and double, so every CPU op can be instantiated in float64 for
// the finite-difference tests with the same code path. float32 products go through oneDNN's sgemm
// where the build has it (the fastest here: onednn_library.h), the rest through OpenBLAS, opened
// with the kernels the CPU's features call for (blas_library.h).
#pragma once

#include <cblas.h>

#include <string>

#include "backend/cpu/blas_library.h"
#include "backend/cpu/onednn_library.h"
#include "core/error.h"

namespace feast::cpu {

// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C; row-major with leading dims.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  const OnednnLibrary* onednn = onednn_library();
  if (onednn && M > 0 && N > 0 && K > 0) {  // oneDNN refuses a zero leading dimension; OpenBLAS takes them
    const int status = onednn->sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                     C, ldc);
    if (status != 0)
      throw Error("oneDNN's sgemm failed (dnnl_status_t " + std::to_string(status) + ") on a " + std::to_string(M) +
                  "x" + std::to_string(K) + " by " + std::to_string(K) + "x" + std::to_string(N) + " product");
    return;
  }
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
