#include "backend/cpu/matmul.h"

#include <cstddef>

#include "backend/cpu/blas.h"

namespace feast::cpu {

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  T beta = T(0);
  if (bias) {
    // Seed the output with the bias so the GEMM adds into it (beta = 1): no extra pass after.
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      T* row = out + static_cast<size_t>(n) * OC;
      for (int o = 0; o < OC; ++o) row[o] = bias[o];
    }
    beta = T(1);
  }
  gemm(false, true, N, OC, C, T(1), inp, C, weight, C, beta, out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (dinp) matmul_backward_input(dinp, dout, weight, N, C, OC);
  matmul_backward_weight_rows(dweight, dout, inp, N, C, OC, 0, OC);
  if (dbias) {
    // Parallel over output channels, rows summed in order: deterministic at any thread count.
    constexpr int kBlock = 64;
    const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kBlock, o1 = o0 + kBlock < OC ? o0 + kBlock : OC;
      T acc[kBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* row = dout + static_cast<size_t>(n) * OC;
        for (int o = o0; o < o1; ++o) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
    }
  }
}

template <typename T>
void matmul_backward_input(T* dinp, const T* dout, const T* weight, int N, int C, int OC) {
  gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
}

template <typename T>
void matmul_backward_weight_rows(T* dweight_rows, const T* dout, const T* inp, int N, int C, int OC, int row_begin,
                                 int row_end) {
  // dout^T restricted to columns [row_begin, row_end): a column offset into the (N, OC) matrix.
  gemm(true, false, row_end - row_begin, C, N, T(1), dout + row_begin, OC, inp, C, T(1), dweight_rows, C);
}

template void matmul_backward_input<float>(float*, const float*, const float*, int, int, int);
template void matmul_backward_input<double>(double*, const double*, const double*, int, int, int);
template void matmul_backward_weight_rows<float>(float*, const float*, const float*, int, int, int, int, int);
template void matmul_backward_weight_rows<double>(double*, const double*, const double*, int, int, int, int, int);
template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int, int);

}  // namespace feast::cpu
