// Causal multi-head self-attention on the CPU, as batched GEMMs per (batch, head) on strided
// views of the fused QKV activation (no copies into per-head buffers).
// Legend: B batch, T time, C channels, NH heads, hs = C / NH head size.
#pragma once

namespace feast::cpu {

// qkv (B, T, 3C) holds [q | k | v], each NH heads of hs channels.
// out (B, T, C) = softmax(q k^T / sqrt(hs), causal) v per head, heads concatenated;
// att (B, NH, T, T) keeps the softmax probabilities for the backward pass (zeros above the
// diagonal).
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH);

// dqkv (B, T, 3C) = d loss / d qkv (overwritten). scratch holds T*T elements per OpenMP thread
// (attention_scratch_size).
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int NH, T* scratch);

// Elements of scratch attention_backward needs for sequence length T.
long attention_scratch_size(int Tn);

}  // namespace feast::cpu
