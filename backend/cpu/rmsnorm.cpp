#include "backend/cpu/rmsnorm.h"

#include <cmath>
#include <cstddef>

namespace feast::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    T* y = out + static_cast<size_t>(n) * C;
    T ss = 0;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const T r = T(1) / std::sqrt(ss / T(C) + eps);
    for (int c = 0; c < C; ++c) y[c] = x[c] * r * weight[c];
    rstd[n] = r;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * C;
    const T* x = inp + off;
    const T* dy = dout + off;
    T* dx = dinp + off;
    const T r = rstd[n];
    // With n = x r and g = dy w: dx = r (g - n mean(g n)).
    T dot = 0;
    for (int c = 0; c < C; ++c) dot += dy[c] * weight[c] * x[c] * r;
    dot /= T(C);
    for (int c = 0; c < C; ++c) dx[c] += r * (dy[c] * weight[c] - x[c] * r * dot);
  }
  // The weight's gradient: parallel over channel blocks, rows summed in order.
  constexpr int kBlock = 64;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    T dw[kBlock] = {};
    for (int n = 0; n < N; ++n) {
      const size_t off = static_cast<size_t>(n) * C;
      for (int c = c0; c < c1; ++c) dw[c - c0] += dout[off + c] * inp[off + c] * rstd[n];
    }
    for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*, int,
                                       int);

}  // namespace feast::cpu
