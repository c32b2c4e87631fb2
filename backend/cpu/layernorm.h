// LayerNorm on the CPU (as torch.nn.LayerNorm; GPT-2 uses eps = 1e-5). Legend: N rows, C channels.
#pragma once

namespace feast::cpu {

// out (N, C), mean (N), rstd (N) from inp (N, C), weight (C), bias (C). mean and rstd are saved
// for the backward pass.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, T eps);

// dinp (N, C) += d loss / d inp (accumulates: the residual stream's gradient arrives first);
// dweight (C) += and dbias (C) += over all rows.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int N, int C);

}  // namespace feast::cpu
