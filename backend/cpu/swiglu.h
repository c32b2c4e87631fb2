// SwiGLU on the CPU (Llama's MLP activation): the fused gate/up projection's output is split in
// two halves and out = silu(gate) * up. Legend: N rows, I the MLP width (this rank's part).
#pragma once

namespace feast::cpu {

// inp (N, 2I) holds [gate | up] per row; out (N, I) = silu(gate) * up.
template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int I);

// dinp (N, 2I) = d loss / d inp (overwritten) from dout (N, I).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int I);

}  // namespace feast::cpu
