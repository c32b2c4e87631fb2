// Causal self-attention with grouped-query heads on the CPU, as GEMMs per (batch, head) on
// strided views of the fused QKV activation (no copies into per-head buffers). Multi-head
// attention is the case NKV = NH. Query head h reads key/value head h / (NH / NKV), as Hugging
// Face's repeat_kv does.
// Legend: B batch, T time, NH query heads, NKV key/value heads, hs head size,
// W = (NH + 2 NKV) hs the width of a QKV row.
#pragma once

#include <cstdint>

namespace feast::cpu {

// qkv (B, T, W) holds [q | k | v]: NH heads of q, then NKV heads of k, then NKV heads of v.
// out (B, T, NH hs) = softmax(q k^T / sqrt(hs), causal) v per query head, heads concatenated;
// att (B, NH, T, T) keeps the softmax probabilities for the backward pass (zeros above the
// diagonal; under document masks only the documents' blocks on the diagonal are written, and
// read back). positions (B, T), or null: each token's place in its document (document masks):
// query t then sees keys t - positions[t] .. t only, never an earlier document's.
template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int NH, int NKV, int hs,
                       const int32_t* positions = nullptr);

// dqkv (B, T, W) = d loss / d qkv (overwritten). scratch holds T*T elements per thread that runs
// the backward: it runs on at most scratch_elems / (T*T) threads (attention_scratch_size sizes
// it for the current OpenMP team), and throws feast::Error when that is less than one.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tn, int NH, int NKV, int hs,
                        const int32_t* positions, T* scratch, long scratch_elems);

// Elements of scratch attention_backward needs for sequence length T on `threads` threads.
long attention_scratch_size(int Tn, int threads);

}  // namespace feast::cpu
