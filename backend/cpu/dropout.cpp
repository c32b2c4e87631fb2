#include "backend/cpu/dropout.h"

#include <cstddef>

namespace feast::cpu {

template <typename T>
void dropout_forward(T* out, const T* inp, const DropoutShape& s) {
  const T scale = T(dropout_scale(s.p));
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.N; ++r)
    for (int c = 0; c < s.C; ++c) {
      const size_t i = size_t(r) * size_t(s.C) + size_t(c);
      out[i] = dropout_keeps(s, r, c) ? inp[i] * scale : T(0);
    }
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, const DropoutShape& s) {
  const T scale = T(dropout_scale(s.p));
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.N; ++r)
    for (int c = 0; c < s.C; ++c) {
      const size_t i = size_t(r) * size_t(s.C) + size_t(c);
      if (dropout_keeps(s, r, c)) dinp[i] += dout[i] * scale;
    }
}

template void dropout_forward<float>(float*, const float*, const DropoutShape&);
template void dropout_forward<double>(double*, const double*, const DropoutShape&);
template void dropout_backward<float>(float*, const float*, const DropoutShape&);
template void dropout_backward<double>(double*, const double*, const DropoutShape&);

}  // namespace feast::cpu
