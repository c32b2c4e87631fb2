// Residual connection on the CPU: out = a + b, element-wise over n values.
#pragma once

#include <cstddef>

namespace feast::cpu {

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n);

}  // namespace feast::cpu
