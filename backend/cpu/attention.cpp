#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "backend/cpu/blas.h"
#include "backend/scalar_math.h"

namespace feast::cpu {

long attention_scratch_size(int Tn, int threads) { return static_cast<long>(threads) * Tn * Tn; }

namespace {

// The first key query i of row b sees: its document's first token under document masks
// (positions: each token's place in its document), else the row's first.
inline int first_key(const int32_t* positions, int b, int Tn, int i) {
  return positions ? i - positions[static_cast<size_t>(b) * Tn + i] : 0;
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int NKV, int hs, const int32_t* positions) {
  const int W = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV;
  const T scale = T(1) / std::sqrt(T(hs));
  // One (batch, query head) per iteration; OpenBLAS runs single-threaded inside the parallel
  // region, so the GEMMs of different heads run side by side.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH, g = h / group;
    const T* row0 = qkv + static_cast<size_t>(b) * Tn * W;
    const T* q = row0 + h * hs;                   // (T, hs), row stride W
    const T* k = row0 + C + g * hs;
    const T* v = row0 + C + NKV * hs + g * hs;
    T* p = att + static_cast<size_t>(bh) * Tn * Tn;          // (T, T)
    T* y = out + static_cast<size_t>(b) * Tn * C + h * hs;  // (T, hs), row stride C
    gemm(false, true, Tn, Tn, hs, scale, q, W, k, W, T(0), p, Tn);
    for (int i = 0; i < Tn; ++i) {
      T* row = p + static_cast<size_t>(i) * Tn;
      const int lo = first_key(positions, b, Tn, i);
      T mx = row[lo];
      for (int j = lo + 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = lo; j <= i; ++j) {
        row[j] = fast_exp(row[j] - mx);
        sum += row[j];
      }
      const T inv = T(1) / sum;
      for (int j = lo; j <= i; ++j) row[j] *= inv;
      for (int j = 0; j < lo; ++j) row[j] = T(0);       // an earlier document
      for (int j = i + 1; j < Tn; ++j) row[j] = T(0);  // causal mask
    }
    gemm(false, false, Tn, hs, Tn, T(1), p, Tn, v, W, T(0), y, C);
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int NH, int NKV, int hs,
                        const int32_t* positions, T* scratch, long scratch_elems) {
  const int W = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV;
  const T scale = T(1) / std::sqrt(T(hs));
  // Each thread needs its own (T, T) scratch: never run on more threads than it has room for.
  const long per_thread = static_cast<long>(Tn) * Tn;
  const int threads = static_cast<int>(std::min<long>(omp_get_max_threads(), scratch_elems / per_thread));
  FEAST_CHECK(threads >= 1, "attention backward scratch of " << scratch_elems << " elements cannot hold one " << Tn
                                                             << "x" << Tn << " block");
  // One (batch, key/value head) per iteration: the query heads of a group add into the same dk
  // and dv, so they run in order on one thread (deterministic, no races).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bg = 0; bg < B * NKV; ++bg) {
    const int b = bg / NKV, g = bg % NKV;
    const size_t row0 = static_cast<size_t>(b) * Tn * W;
    const T* k = qkv + row0 + C + g * hs;
    const T* v = qkv + row0 + C + NKV * hs + g * hs;
    T* dk = dqkv + row0 + C + g * hs;
    T* dv = dqkv + row0 + C + NKV * hs + g * hs;
    T* ds = scratch + static_cast<size_t>(omp_get_thread_num()) * per_thread;  // (T, T)
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const T beta = h == g * group ? T(0) : T(1);  // the group's first head overwrites dk, dv
      const T* q = qkv + row0 + h * hs;
      T* dq = dqkv + row0 + h * hs;
      const T* p = att + (static_cast<size_t>(b) * NH + h) * per_thread;
      const T* dy = dout + static_cast<size_t>(b) * Tn * C + h * hs;
      gemm(true, false, Tn, hs, Tn, T(1), p, Tn, dy, C, beta, dv, W);  // dv (+)= p^T dy
      gemm(false, true, Tn, Tn, hs, T(1), dy, C, v, W, T(0), ds, Tn);  // dp = dy v^T
      // Softmax backward in place: ds = p * (dp - sum_j p dp) * scale; zero outside the keys the
      // query sees because p is.
      for (int i = 0; i < Tn; ++i) {
        const T* prow = p + static_cast<size_t>(i) * Tn;
        T* row = ds + static_cast<size_t>(i) * Tn;
        const int lo = first_key(positions, b, Tn, i);
        T dot = 0;
        for (int j = lo; j <= i; ++j) dot += prow[j] * row[j];
        for (int j = lo; j <= i; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
        for (int j = 0; j < lo; ++j) row[j] = T(0);
        for (int j = i + 1; j < Tn; ++j) row[j] = T(0);
      }
      gemm(false, false, Tn, hs, Tn, T(1), ds, Tn, k, W, T(0), dq, W);  // dq = ds k
      gemm(true, false, Tn, hs, Tn, T(1), ds, Tn, q, W, beta, dk, W);   // dk (+)= ds^T q
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, int, const int32_t*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, int, const int32_t*);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int, int,
                                        const int32_t*, float*, long);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int, int,
                                         int, const int32_t*, double*, long);

}  // namespace feast::cpu
