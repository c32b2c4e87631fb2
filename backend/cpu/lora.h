// LoRA's low-rank update on the CPU (Backend::lora_forward/backward): five GEMMs on strided
// views, the output columns addressed through the leading dimension, so nothing is copied.
// Legend: N rows, C input width, r rank, OC the adapter's output columns at [col, col + OC) of
// an output out_ld wide.
#pragma once

#include "backend/backend.h"

namespace feast::cpu {

// h (N, r) = scale * inp @ a^T; out[:, col:col+OC] += h @ b^T.
template <typename T>
void lora_forward(T* out, T* h, const T* inp, const T* a, const T* b, const LoraShape& s);
// h as lora_forward; db (OC, r) += g^T h with g = dout[:, col:col+OC]; dh = scale * g @ b;
// da (r, C) += dh^T inp; dinp (N, C) += dh @ a (skipped when null).
template <typename T>
void lora_backward(T* dinp, T* da, T* db, T* h, T* dh, const T* dout, const T* inp, const T* a, const T* b,
                   const LoraShape& s);

}  // namespace feast::cpu
