// LoRA dropout on the CPU (Backend::dropout_forward/backward; the mask: backend/dropout_mask.h).
#pragma once

#include "backend/dropout_mask.h"

namespace feast::cpu {

// out (N, C) = inp * keep / (1 - p).
template <typename T>
void dropout_forward(T* out, const T* inp, const DropoutShape& s);
// dinp (N, C) += dout * keep / (1 - p).
template <typename T>
void dropout_backward(T* dinp, const T* dout, const DropoutShape& s);

}  // namespace feast::cpu
