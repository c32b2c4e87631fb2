// Token + learned position embedding on the CPU. Legend: B batch, T time, C channels,
// Vp padded vocabulary.
#pragma once

#include <cstdint>

namespace feast::cpu {

// out (B, T, C) = wte[tokens[b, t]] + wpe[t]; wte (Vp, C), wpe (maxT, C).
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C);

// dwte (Vp, C) += scattered dout rows; dwpe (maxT, C) += dout summed over the batch.
// Parallel over channel blocks with tokens in order, so repeated tokens accumulate
// deterministically.
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                      int C);

}  // namespace feast::cpu
