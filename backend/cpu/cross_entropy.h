// Softmax + cross-entropy over a padded, possibly vocab-parallel vocabulary on the CPU, fused
// with its backward so the logits buffer turns into its gradient in place. A rank holds logit
// columns [vocab_begin, vocab_begin + Vl) of the padded vocabulary; columns at or above the real
// vocabulary V are excluded from the softmax and get zero gradient (Megatron-LM #1754 shows what
// happens when they are not). Across tensor-parallel ranks the full logits are never gathered:
// the caller reduces the row maxima (max) and the sums of exponentials and target logits (sum)
// between the three phases. Legend: N rows (B*T tokens), Vl local columns.
#pragma once

#include <cstdint>

namespace feast::cpu {

// Phase 1: row_max (N) = max over this rank's real columns (-inf when it has none).
template <typename T>
void cross_entropy_row_max(T* row_max, const T* logits, int N, int Vl, int vocab_begin, int V);

// Phase 2: sum_exp (N) = sum over real local columns of exp(logit - row_max);
// target_logit (N) = the target's logit when the target is a local column, else 0. With
// keep_exp the logits are overwritten by exp(logit - row_max) (phase 3 then needs no second
// exponential); without, they are left as they are.
template <typename T>
void cross_entropy_partials(T* sum_exp, T* target_logit, T* logits, const T* row_max, const int32_t* targets,
                            int N, int Vl, int vocab_begin, int V, bool keep_exp);

// Phase 3: losses (N) = log(sum_exp) + row_max - target_logit. With dloss != 0 (after phase 2
// with keep_exp) the logits are overwritten by d(dloss * sum(losses))/d logits =
// (softmax - onehot(target)) * dloss, zero in padded columns.
template <typename T>
void cross_entropy_finish(T* logits, T* losses, const T* row_max, const T* sum_exp, const T* target_logit,
                          const int32_t* targets, int N, int Vl, int vocab_begin, int V, T dloss);

// The three phases on one rank holding all Vp columns: losses (N) from logits (N, Vp).
template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V, int Vp);

// As forward, then logits becomes its gradient (see cross_entropy_finish).
template <typename T>
void cross_entropy_forward_backward(T* logits, T* losses, const int32_t* targets, int N, int V, int Vp,
                                    T dloss);

}  // namespace feast::cpu
