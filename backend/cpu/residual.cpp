#include "backend/cpu/residual.h"

namespace feast::cpu {

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);

}  // namespace feast::cpu
