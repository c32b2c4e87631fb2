#include "backend/cpu/cross_entropy.h"

#include "backend/scalar_math.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace feast::cpu {
namespace {

// Local columns that are real vocabulary entries: [0, real).
int real_columns(int Vl, int vocab_begin, int V) { return std::clamp(V - vocab_begin, 0, Vl); }

}  // namespace

template <typename T>
void cross_entropy_row_max(T* row_max, const T* logits, int N, int Vl, int vocab_begin, int V) {
  const int real = real_columns(Vl, vocab_begin, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* row = logits + static_cast<size_t>(n) * Vl;
    T mx = -std::numeric_limits<T>::infinity();
    for (int v = 0; v < real; ++v) mx = row[v] > mx ? row[v] : mx;
    row_max[n] = mx;
  }
}

template <typename T>
void cross_entropy_partials(T* sum_exp, T* target_logit, T* logits, const T* row_max, const int32_t* targets,
                            int N, int Vl, int vocab_begin, int V, bool keep_exp) {
  const int real = real_columns(Vl, vocab_begin, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* row = logits + static_cast<size_t>(n) * Vl;
    const T mx = row_max[n];
    const int local = targets[n] - vocab_begin;
    target_logit[n] = local >= 0 && local < real ? row[local] : T(0);
    T sum = 0;
    if (keep_exp) {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < real; ++v) {
        row[v] = fast_exp(row[v] - mx);
        sum += row[v];
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < real; ++v) sum += fast_exp(row[v] - mx);
    }
    sum_exp[n] = sum;
  }
}

template <typename T>
void cross_entropy_finish(T* logits, T* losses, const T* row_max, const T* sum_exp, const T* target_logit,
                          const int32_t* targets, int N, int Vl, int vocab_begin, int V, T dloss) {
  const int real = real_columns(Vl, vocab_begin, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* row = logits + static_cast<size_t>(n) * Vl;  // exp(logit - row_max), from phase 2
    if (targets[n] < 0) {  // an ignored target (a prompt token under a loss mask): no loss, no gradient
      losses[n] = T(0);
      if (dloss != T(0))
        for (int v = 0; v < Vl; ++v) row[v] = T(0);
      continue;
    }
    losses[n] = row_max[n] + std::log(sum_exp[n]) - target_logit[n];
    if (dloss == T(0)) continue;
    const T scale = dloss / sum_exp[n];
#pragma omp simd
    for (int v = 0; v < real; ++v) row[v] *= scale;
    for (int v = real; v < Vl; ++v) row[v] = T(0);
    const int local = targets[n] - vocab_begin;
    if (local >= 0 && local < real) row[local] -= dloss;
  }
}

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp) {
  std::vector<T> mx(static_cast<size_t>(N)), se(static_cast<size_t>(N)), tl(static_cast<size_t>(N));
  // Without keep_exp and with dloss = 0 nothing writes the logits.
  T* unwritten = const_cast<T*>(logits);
  cross_entropy_row_max(mx.data(), logits, N, Vp, 0, V);
  cross_entropy_partials(se.data(), tl.data(), unwritten, mx.data(), targets, N, Vp, 0, V, false);
  cross_entropy_finish(unwritten, losses, mx.data(), se.data(), tl.data(), targets, N, Vp, 0, V, T(0));
}

template <typename T>
void cross_entropy_forward_backward(T* logits, T* losses, const int32_t* targets, int N, int V, int Vp,
                                    T dloss) {
  std::vector<T> mx(static_cast<size_t>(N)), se(static_cast<size_t>(N)), tl(static_cast<size_t>(N));
  cross_entropy_row_max(mx.data(), logits, N, Vp, 0, V);
  cross_entropy_partials(se.data(), tl.data(), logits, mx.data(), targets, N, Vp, 0, V, true);
  cross_entropy_finish(logits, losses, mx.data(), se.data(), tl.data(), targets, N, Vp, 0, V, dloss);
}

#define FEAST_INSTANTIATE(T)                                                                          \
  template void cross_entropy_row_max<T>(T*, const T*, int, int, int, int);                            \
  template void cross_entropy_partials<T>(T*, T*, T*, const T*, const int32_t*, int, int, int, int, bool); \
  template void cross_entropy_finish<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int, int, int, \
                                        int, T);                                                        \
  template void cross_entropy_forward<T>(T*, const T*, const int32_t*, int, int, int);                 \
  template void cross_entropy_forward_backward<T>(T*, T*, const int32_t*, int, int, int, T);
FEAST_INSTANTIATE(float)
FEAST_INSTANTIATE(double)
#undef FEAST_INSTANTIATE

}  // namespace feast::cpu
