#include "backend/cpu/layernorm.h"

#include <cmath>
#include <cstddef>

namespace feast::cpu {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, T eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    T* y = out + static_cast<size_t>(n) * C;
    T m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= T(C);
    T var = 0;  // two passes: no cancellation from E[x^2] - E[x]^2
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= T(C);
    const T r = T(1) / std::sqrt(var + eps);
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t off = static_cast<size_t>(n) * C;
    const T* x = inp + off;
    const T* dy = dout + off;
    T* dx = dinp + off;
    const T m = mean[n], r = rstd[n];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * r;
      const T dnorm = dy[c] * weight[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= T(C);
    dnorm_norm_mean /= T(C);
    for (int c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * r;
      const T dnorm = dy[c] * weight[c];
      dx[c] += r * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
  // Parameter gradients: parallel over channel blocks, rows summed in order (deterministic).
  constexpr int kBlock = 64;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    T dw[kBlock] = {}, db[kBlock] = {};
    for (int n = 0; n < N; ++n) {
      const size_t off = static_cast<size_t>(n) * C;
      const T m = mean[n], r = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dw[c - c0] += dout[off + c] * (inp[off + c] - m) * r;
        db[c - c0] += dout[off + c];
      }
    }
    for (int c = c0; c < c1; ++c) {
      dweight[c] += dw[c - c0];
      dbias[c] += db[c - c0];
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*, const double*, const double*, int, int);

}  // namespace feast::cpu
