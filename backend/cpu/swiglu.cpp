#include "backend/cpu/swiglu.h"

#include <cstddef>

#include "backend/scalar_math.h"

namespace feast::cpu {

template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* gate = inp + static_cast<size_t>(n) * 2 * I;
    const T* up = gate + I;
    T* o = out + static_cast<size_t>(n) * I;
#pragma omp simd
    for (int i = 0; i < I; ++i) o[i] = silu(gate[i]) * up[i];
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int I) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* gate = inp + static_cast<size_t>(n) * 2 * I;
    const T* up = gate + I;
    const T* d = dout + static_cast<size_t>(n) * I;
    T* dgate = dinp + static_cast<size_t>(n) * 2 * I;
    T* dup = dgate + I;
#pragma omp simd
    for (int i = 0; i < I; ++i) {
      dgate[i] = d[i] * up[i] * silu_grad(gate[i]);
      dup[i] = d[i] * silu(gate[i]);
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);

}  // namespace feast::cpu
