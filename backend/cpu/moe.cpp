#include "backend/cpu/moe.h"

#include <cmath>
#include <cstddef>

#include "backend/moe_route.h"

namespace feast::cpu {

template <typename T, typename L>
void moe_route(T* probs, T* lse, int32_t* expert, T* weight, T* prob_sum, const L* logits, int N, int E, int k,
               bool renormalize) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const L* x = logits + size_t(n) * size_t(E);
    T* p = probs + size_t(n) * size_t(E);
    T max = T(x[0]);
    for (int e = 1; e < E; ++e) max = std::max(max, T(x[e]));
    T sum = 0;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(T(x[e]) - max);
      sum += p[e];
    }
    for (int e = 0; e < E; ++e) p[e] /= sum;
    lse[n] = max + std::log(sum);
    moe_top_k(p, E, k, renormalize, expert + size_t(n) * size_t(k), weight + size_t(n) * size_t(k));
  }
  for (int e = 0; e < E; ++e) prob_sum[e] = 0;
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < E; ++e) prob_sum[e] += probs[size_t(n) * size_t(E) + size_t(e)];
}

template <typename T, typename L>
void moe_route_backward(L* dlogits, const T* probs, const T* lse, const int32_t* expert, const T* weight,
                        const T* dweight, const T* dprob, T z_scale, int N, int E, int k, bool renormalize) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t rk = size_t(n) * size_t(k);
    moe_route_grad_row(dlogits + size_t(n) * size_t(E), probs + size_t(n) * size_t(E), lse[n], expert + rk,
                       weight + rk, dweight + rk, dprob, z_scale, E, k, renormalize);
  }
}

template <typename T>
void moe_gather(T* rows, const T* inp, const int32_t* token, int M, int C) {
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; ++m) {
    const T* src = inp + size_t(token[m]) * size_t(C);
    T* dst = rows + size_t(m) * size_t(C);
    for (int c = 0; c < C; ++c) dst[c] = src[c];
  }
}

template <typename T>
void moe_gather_backward(T* dinp, const T* drows, const int32_t* slot, int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* d = dinp + size_t(n) * size_t(C);
    for (int j = 0; j < k; ++j) {
      const int32_t s = slot[size_t(n) * size_t(k) + size_t(j)];
      if (s < 0) continue;
      const T* src = drows + size_t(s) * size_t(C);
      for (int c = 0; c < C; ++c) d[c] += src[c];
    }
  }
}

template <typename T, typename W>
void moe_combine(T* out, const T* rows, const int32_t* slot, const W* weight, int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* o = out + size_t(n) * size_t(C);
    for (int j = 0; j < k; ++j) {
      const size_t i = size_t(n) * size_t(k) + size_t(j);
      if (slot[i] < 0) continue;
      const T w = T(weight[i]);
      const T* r = rows + size_t(slot[i]) * size_t(C);
      for (int c = 0; c < C; ++c) o[c] += w * r[c];
    }
  }
}

template <typename T, typename W>
void moe_combine_backward(T* drows, W* dweight, const T* dout, const T* rows, const int32_t* slot, const W* weight,
                          int N, int k, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* g = dout + size_t(n) * size_t(C);
    for (int j = 0; j < k; ++j) {
      const size_t i = size_t(n) * size_t(k) + size_t(j);
      if (slot[i] < 0) {
        dweight[i] = 0;
        continue;
      }
      const T w = T(weight[i]);
      const T* r = rows + size_t(slot[i]) * size_t(C);
      T* d = drows + size_t(slot[i]) * size_t(C);
      W dot = 0;
      for (int c = 0; c < C; ++c) {
        d[c] = w * g[c];
        dot += W(g[c]) * W(r[c]);
      }
      dweight[i] = dot;
    }
  }
}

template <typename T, typename L>
void moe_shared_gate(T* gate, const L* logits, int N) {
  for (int n = 0; n < N; ++n) gate[n] = T(1) / (T(1) + std::exp(-T(logits[n])));
}

template <typename T, typename L>
void moe_shared_gate_backward(L* dlogits, const T* gate, const T* dgate, int N) {
  for (int n = 0; n < N; ++n) dlogits[n] = L(dgate[n] * gate[n] * (T(1) - gate[n]));
}

#define FEAST_MOE_INSTANTIATE(T, L)                                                                              \
  template void moe_route<T, L>(T*, T*, int32_t*, T*, T*, const L*, int, int, int, bool);                         \
  template void moe_route_backward<T, L>(L*, const T*, const T*, const int32_t*, const T*, const T*, const T*, T, \
                                         int, int, int, bool);                                                    \
  template void moe_combine<L, T>(L*, const L*, const int32_t*, const T*, int, int, int);                         \
  template void moe_combine_backward<L, T>(L*, T*, const L*, const L*, const int32_t*, const T*, int, int, int);  \
  template void moe_shared_gate<T, L>(T*, const L*, int);                                                         \
  template void moe_shared_gate_backward<T, L>(L*, const T*, const T*, int);
FEAST_MOE_INSTANTIATE(float, float)
FEAST_MOE_INSTANTIATE(double, double)
#undef FEAST_MOE_INSTANTIATE
template void moe_gather<float>(float*, const float*, const int32_t*, int, int);
template void moe_gather<double>(double*, const double*, const int32_t*, int, int);
template void moe_gather_backward<float>(float*, const float*, const int32_t*, int, int, int);
template void moe_gather_backward<double>(double*, const double*, const int32_t*, int, int, int);

}  // namespace feast::cpu
