#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "backend/cpu/blas.h"
#include "backend/scalar_math.h"

namespace feast::cpu {

long attention_scratch_size(int Tn, int threads) { return static_cast<long>(threads) * Tn * Tn; }

namespace {

// The documents of row b: [start, end) runs of the row, each starting where positions restarts
// at 0 (document masks), else the whole row. Queries attend within their document only, so each
// document is a causal attention of its own: blocks on the diagonal of the (T, T) matrix, and
// nothing outside them is computed or read.
using Documents = std::vector<std::pair<int, int>>;

Documents documents_of(const int32_t* positions, int b, int Tn) {
  if (!positions) return {{0, Tn}};
  const int32_t* p = positions + static_cast<size_t>(b) * Tn;
  FEAST_CHECK(Tn == 0 || p[0] == 0, "attention: row " << b << " starts at document position " << p[0] << ", not 0");
  Documents docs;
  for (int t = 0; t < Tn; ++t) {
    if (p[t] == 0) {
      if (!docs.empty()) docs.back().second = t;
      docs.emplace_back(t, Tn);
    } else {
      FEAST_CHECK(p[t] == p[t - 1] + 1, "attention: row " << b << " position " << t << " is " << p[t] << " after "
                                                          << p[t - 1] << ": document positions count up from 0");
    }
  }
  return docs;
}

// Every row's documents, found once for all the heads that read them.
std::vector<Documents> documents_of_rows(const int32_t* positions, int B, int Tn) {
  std::vector<Documents> docs;
  docs.reserve(size_t(B));
  for (int b = 0; b < B; ++b) docs.push_back(documents_of(positions, b, Tn));
  return docs;
}

}  // namespace

// The (T, T) probabilities of a (batch, head) hold each document's causal block on the diagonal;
// entries outside the blocks are left as they were (neither backward reads them).
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int NKV, int hs, const int32_t* positions) {
  const int W = (NH + 2 * NKV) * hs, C = NH * hs, group = NH / NKV;
  const T scale = T(1) / std::sqrt(T(hs));
  // One (batch, query head) per iteration; OpenBLAS runs single-threaded inside the parallel
  // region, so the GEMMs of different heads run side by side.
  const std::vector<Documents> docs = documents_of_rows(positions, B, Tn);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH, g = h / group;
    const T* row0 = qkv + static_cast<size_t>(b) * Tn * W;
    T* p = att + static_cast<size_t>(bh) * Tn * Tn;          // (T, T)
    T* y = out + static_cast<size_t>(b) * Tn * C + h * hs;  // (T, hs), row stride C
    for (const auto& [s, e] : docs[size_t(b)]) {
      const int n = e - s;
      const T* q = row0 + static_cast<size_t>(s) * W + h * hs;  // (n, hs), row stride W
      const T* k = row0 + static_cast<size_t>(s) * W + C + g * hs;
      const T* v = row0 + static_cast<size_t>(s) * W + C + NKV * hs + g * hs;
      T* blk = p + static_cast<size_t>(s) * Tn + s;  // (n, n), row stride T
      gemm(false, true, n, n, hs, scale, q, W, k, W, T(0), blk, Tn);
      for (int i = 0; i < n; ++i) {
        T* row = blk + static_cast<size_t>(i) * Tn;
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
        for (int j = i + 1; j < n; ++j) row[j] = T(0);  // causal mask
      }
      gemm(false, false, n, hs, n, T(1), blk, Tn, v, W, T(0), y + static_cast<size_t>(s) * C, C);
    }
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
  // and dv, so they run in order on one thread (deterministic, no races). Every row belongs to
  // one document, so each block's products write its rows of dq, dk and dv.
  const std::vector<Documents> docs = documents_of_rows(positions, B, Tn);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int bg = 0; bg < B * NKV; ++bg) {
    const int b = bg / NKV, g = bg % NKV;
    T* ds = scratch + static_cast<size_t>(omp_get_thread_num()) * per_thread;  // (n, n) blocks, row stride n
    for (const auto& [s, e] : docs[size_t(b)]) {
      const int n = e - s;
      const size_t row0 = (static_cast<size_t>(b) * Tn + s) * W;
      const T* k = qkv + row0 + C + g * hs;
      const T* v = qkv + row0 + C + NKV * hs + g * hs;
      T* dk = dqkv + row0 + C + g * hs;
      T* dv = dqkv + row0 + C + NKV * hs + g * hs;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const T beta = h == g * group ? T(0) : T(1);  // the group's first head overwrites dk, dv
        const T* q = qkv + row0 + h * hs;
        T* dq = dqkv + row0 + h * hs;
        const T* p = att + (static_cast<size_t>(b) * NH + h) * per_thread + static_cast<size_t>(s) * Tn + s;
        const T* dy = dout + (static_cast<size_t>(b) * Tn + s) * C + h * hs;
        gemm(true, false, n, hs, n, T(1), p, Tn, dy, C, beta, dv, W);  // dv (+)= p^T dy
        gemm(false, true, n, n, hs, T(1), dy, C, v, W, T(0), ds, n);   // dp = dy v^T
        // Softmax backward in place: ds = p * (dp - sum_j p dp) * scale; zero above the diagonal
        // because p is.
        for (int i = 0; i < n; ++i) {
          const T* prow = p + static_cast<size_t>(i) * Tn;
          T* row = ds + static_cast<size_t>(i) * n;
          T dot = 0;
          for (int j = 0; j <= i; ++j) dot += prow[j] * row[j];
          for (int j = 0; j <= i; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
          for (int j = i + 1; j < n; ++j) row[j] = T(0);
        }
        gemm(false, false, n, hs, n, T(1), ds, n, k, W, T(0), dq, W);  // dq = ds k
        gemm(true, false, n, hs, n, T(1), ds, n, q, W, beta, dk, W);   // dk (+)= ds^T q
      }
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
