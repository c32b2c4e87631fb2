// Token + learned position embedding on the CPU, vocab-parallel: a rank holds rows
// [vocab_begin, vocab_end) of the token table and contributes zeros for other tokens; the
// tensor-parallel group then sums the ranks' outputs. Legend: B batch, T time, C channels,
// Vl = vocab_end - vocab_begin local vocabulary rows.
#pragma once

#include <climits>
#include <cstdint>

namespace feast::cpu {

// out (B, T, C) = wte[tokens[b, t] - vocab_begin] (zero when the token is not local)
// + wpe[t] (skipped when wpe is null: only one tensor-parallel rank adds it); wte (Vl, C),
// wpe (maxT, C). With positions (B, T) the row adds wpe[positions[b, t]] instead (document
// masks: its place in its document).
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                     int vocab_begin = 0, int vocab_end = INT_MAX, const int32_t* positions = nullptr);

// dwte (Vl, C) += dout rows of local tokens; dwpe (maxT, C) += dout summed over the batch
// (skipped when null), into the row of each token's position (t, or positions[b, t]). Parallel over channel blocks with tokens in order, so repeated tokens
// accumulate deterministically.
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                      int vocab_begin = 0, int vocab_end = INT_MAX, const int32_t* positions = nullptr);

}  // namespace feast::cpu
