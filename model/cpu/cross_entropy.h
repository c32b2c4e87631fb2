// Softmax + cross-entropy over a padded vocabulary on the CPU, fused with its backward so the
// (N, Vp) logits buffer is turned into its gradient in place. Padded columns (>= V) are
// excluded from the softmax and get zero gradient (Megatron-LM #1754 shows what happens when
// they are not). Legend: N rows (B*T tokens), V real vocabulary, Vp padded vocabulary.
#pragma once

#include <cstdint>

namespace feast::cpu {

// losses (N) = -log softmax(logits[n, :V])[targets[n]]; logits (N, Vp) untouched.
template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V,
                           int Vp);

// As forward, then logits (N, Vp) is overwritten by d loss_total / d logits where
// loss_total = dloss * sum(losses): (softmax - onehot(target)) * dloss, zero in padded columns.
template <typename T>
void cross_entropy_forward_backward(T* logits, T* losses, const int32_t* targets, int N, int V,
                                    int Vp, T dloss);

}  // namespace feast::cpu
