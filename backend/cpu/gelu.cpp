#include "backend/cpu/gelu.h"

#include "backend/scalar_math.h"

namespace feast::cpu {

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) out[i] = gelu_tanh(inp[i]);
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) dinp[i] = dout[i] * gelu_tanh_grad(inp[i]);
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace feast::cpu
