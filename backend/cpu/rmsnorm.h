// RMSNorm on the CPU (Llama's norm): y = x / sqrt(mean(x^2) + eps) * weight, no mean and no
// bias, as Hugging Face's LlamaRMSNorm. Legend: N rows, C channels.
#pragma once

namespace feast::cpu {

// out (N, C) and rstd (N) (saved for the backward) from inp (N, C) and weight (C).
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps);

// dinp (N, C) += d loss / d inp (accumulates: the residual stream's gradient arrives first);
// dweight (C) += over all rows, summed in row order (deterministic at any thread count).
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N, int C);

}  // namespace feast::cpu
