// One block of ring attention (context parallelism, model/context_parallel.h) on the CPU: the
// queries of this rank's two sequence chunks against the keys and values of one rank's two
// chunks, merged into a running output by the online softmax, and the matching backward from
// the final output and log-sum-exp (FlashAttention's recurrence, so no probabilities are kept).
// Templated on float and double, so the finite-difference tests run it in float64.
// Legend: B batch, T this rank's tokens of a sequence (two chunks of c = T/2), NH query heads,
// NKV key/value heads, hs head size, W = (NH + 2 NKV) hs a QKV row, KW = 2 NKV hs a key/value
// row ([k heads | v heads]), C = NH hs an output row.
#pragma once

#include <cstddef>

namespace feast::cpu {

// Global chunk indices of the two halves of the query rows and of the key/value rows. A query
// of chunk i sees every key of a chunk j < i, the keys up to itself in chunk i, none of j > i.
struct ChunkPair {
  int first = 0, second = 0;
};

// Elements of `workspace` both passes need on `threads` threads (they run on as many as it holds).
size_t ring_attention_workspace(int Tn, int hs, int threads);

// out (B, T, C) and lse (B, NH, T): the running output and log-sum-exp, merged with this
// block's (first: overwritten instead; a row that sees no key of the block keeps its values).
// qkv (B, T, W) this rank's; kv (B, T, KW) the block's.
template <typename F>
void ring_attention_forward(F* out, F* lse, const F* qkv, const F* kv, int B, int Tn, int NH, int NKV, int hs,
                            ChunkPair q_chunks, ChunkPair kv_chunks, bool first, F* workspace, size_t workspace_elems);

// dq (B, T, C) += this block's share of d loss / d q; dkv (B, T, KW) += its d loss / d (k, v).
// dout and out (B, T, C) the final output's gradient and the final output; lse the final
// log-sum-exp.
template <typename F>
void ring_attention_backward(F* dq, F* dkv, const F* dout, const F* out, const F* lse, const F* qkv, const F* kv,
                             int B, int Tn, int NH, int NKV, int hs, ChunkPair q_chunks, ChunkPair kv_chunks,
                             F* workspace, size_t workspace_elems);

// kv (N, KW) = the k and v heads of qkv (N, W); dqkv (N, W) = [dq (N, C) | dkv (N, KW)].
template <typename F>
void ring_attention_pack(F* kv, const F* qkv, size_t N, int NH, int NKV, int hs);
template <typename F>
void ring_attention_unpack(F* dqkv, const F* dq, const F* dkv, size_t N, int NH, int NKV, int hs);

}  // namespace feast::cpu
