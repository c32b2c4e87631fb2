#include "model/cpu/cross_entropy.h"

#include <cmath>
#include <cstddef>

namespace feast::cpu {
namespace {

// Max and log-sum-exp of one row's first V logits.
template <typename T>
void row_logsumexp(const T* row, int V, T& max_out, T& lse_out) {
  T mx = row[0];
  for (int v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
  T sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
  max_out = mx;
  lse_out = mx + std::log(sum);
}

}  // namespace

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V,
                           int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* row = logits + static_cast<size_t>(n) * Vp;
    T mx, lse;
    row_logsumexp(row, V, mx, lse);
    losses[n] = lse - row[targets[n]];
  }
}

template <typename T>
void cross_entropy_forward_backward(T* logits, T* losses, const int32_t* targets, int N, int V,
                                    int Vp, T dloss) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* row = logits + static_cast<size_t>(n) * Vp;
    T mx, lse;
    row_logsumexp(row, V, mx, lse);
    const int target = targets[n];
    losses[n] = lse - row[target];
    for (int v = 0; v < V; ++v) row[v] = std::exp(row[v] - lse) * dloss;
    row[target] -= dloss;
    for (int v = V; v < Vp; ++v) row[v] = T(0);
  }
}

template void cross_entropy_forward<float>(float*, const float*, const int32_t*, int, int, int);
template void cross_entropy_forward<double>(double*, const double*, const int32_t*, int, int, int);
template void cross_entropy_forward_backward<float>(float*, float*, const int32_t*, int, int, int, float);
template void cross_entropy_forward_backward<double>(double*, double*, const int32_t*, int, int, int, double);

}  // namespace feast::cpu
