#include "model/cpu/attention.h"

#include <omp.h>

#include <cmath>
#include <cstddef>

#include "model/cpu/blas.h"
#include "model/scalar_math.h"

namespace feast::cpu {

long attention_scratch_size(int Tn) {
  return static_cast<long>(omp_get_max_threads()) * Tn * Tn;
}

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  // One (batch, head) per iteration; OpenBLAS runs single-threaded inside the parallel region,
  // so the GEMMs of different heads run side by side.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const T* q = qkv + static_cast<size_t>(b) * Tn * C3 + h * hs;  // (T, hs), row stride 3C
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* p = att + static_cast<size_t>(bh) * Tn * Tn;  // (T, T)
    T* y = out + static_cast<size_t>(b) * Tn * C + h * hs;  // (T, hs), row stride C
    gemm(false, true, Tn, Tn, hs, scale, q, C3, k, C3, T(0), p, Tn);
    for (int i = 0; i < Tn; ++i) {
      T* row = p + static_cast<size_t>(i) * Tn;
      T mx = row[0];
      for (int j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= i; ++j) {
        row[j] = fast_exp(row[j] - mx);
        sum += row[j];
      }
      const T inv = T(1) / sum;
      for (int j = 0; j <= i; ++j) row[j] *= inv;
      for (int j = i + 1; j < Tn; ++j) row[j] = T(0);  // causal mask
    }
    gemm(false, false, Tn, hs, Tn, T(1), p, Tn, v, C3, T(0), y, C);
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int NH, T* scratch) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const size_t qoff = static_cast<size_t>(b) * Tn * C3 + h * hs;
    const T* q = qkv + qoff;
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* dq = dqkv + qoff;
    T* dk = dq + C;
    T* dv = dq + 2 * C;
    const T* p = att + static_cast<size_t>(bh) * Tn * Tn;
    const T* dy = dout + static_cast<size_t>(b) * Tn * C + h * hs;
    T* ds = scratch + static_cast<size_t>(omp_get_thread_num()) * Tn * Tn;  // (T, T)
    gemm(true, false, Tn, hs, Tn, T(1), p, Tn, dy, C, T(0), dv, C3);   // dv = p^T dy
    gemm(false, true, Tn, Tn, hs, T(1), dy, C, v, C3, T(0), ds, Tn);   // dp = dy v^T
    // Softmax backward in place: ds = p * (dp - sum_j p dp) * scale; zero above the diagonal
    // because p is.
    for (int i = 0; i < Tn; ++i) {
      const T* prow = p + static_cast<size_t>(i) * Tn;
      T* row = ds + static_cast<size_t>(i) * Tn;
      T dot = 0;
      for (int j = 0; j <= i; ++j) dot += prow[j] * row[j];
      for (int j = 0; j <= i; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
      for (int j = i + 1; j < Tn; ++j) row[j] = T(0);
    }
    gemm(false, false, Tn, hs, Tn, T(1), ds, Tn, k, C3, T(0), dq, C3);  // dq = ds k
    gemm(true, false, Tn, hs, Tn, T(1), ds, Tn, q, C3, T(0), dk, C3);   // dk = ds^T q
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int, float*);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int, int, double*);

}  // namespace feast::cpu
