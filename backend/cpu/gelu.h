// GELU (tanh approximation) on the CPU, element-wise over n values.
#pragma once

#include <cstddef>

namespace feast::cpu {

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n);

// dinp = dout * gelu'(inp); dinp may alias dout (the MLP does this in place).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n);

}  // namespace feast::cpu
