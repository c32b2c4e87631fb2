// A mixture of experts' ops on the CPU (model/layers/moe.h): the router's softmax and top-k with
// their backward (the load-balancing and z-losses' gradients folded in), the gather of each
// expert's token rows and the weighted combine of the experts' outputs, each with its backward,
// and Qwen2-MoE's sigmoid gate of the shared experts. Every gradient is computed by gathering
// (each output element written by one thread, its terms added in a fixed order), so results do
// not depend on the thread count. Legend: N tokens, E experts, k experts per token, M rows routed
// to experts, C channels.
#pragma once

#include <cstdint>

namespace feast::cpu {

// probs (N, E) = softmax(logits), lse (N) = logsumexp(logits); expert (N, k) = each row's k most
// probable experts, most probable first (ties: the lower index); weight (N, k) = their
// probabilities, divided by their sum when renormalize; prob_sum (E) = probs summed over rows.
template <typename T, typename L>
void moe_route(T* probs, T* lse, int32_t* expert, T* weight, T* prob_sum, const L* logits, int N, int E, int k,
               bool renormalize);

// dlogits (N, E) = d loss / d logits from dweight (N, k), dprob (E) (d loss / d probs[n, e] for every
// row n) and z_scale (d loss / d lse[n] = 2 z_scale lse[n]).
template <typename T, typename L>
void moe_route_backward(L* dlogits, const T* probs, const T* lse, const int32_t* expert, const T* weight,
                        const T* dweight, const T* dprob, T z_scale, int N, int E, int k, bool renormalize);

// rows (M, C): row m = inp row token[m].
template <typename T>
void moe_gather(T* rows, const T* inp, const int32_t* token, int M, int C);

// dinp (N, C) += for each j < k with slot[n k + j] >= 0, drows row slot[n k + j].
template <typename T>
void moe_gather_backward(T* dinp, const T* drows, const int32_t* slot, int N, int k, int C);

// out (N, C) += sum over j of weight[n k + j] * rows row slot[n k + j] (slots < 0 skipped).
template <typename T, typename W>
void moe_combine(T* out, const T* rows, const int32_t* slot, const W* weight, int N, int k, int C);

// drows row slot[n k + j] = weight[n k + j] * dout row n; dweight[n k + j] = dout row n . rows row
// slot[n k + j] (0 for a skipped choice).
template <typename T, typename W>
void moe_combine_backward(T* drows, W* dweight, const T* dout, const T* rows, const int32_t* slot, const W* weight,
                          int N, int k, int C);

// gate (N) = sigmoid(logits); dlogits (N) = dgate * gate * (1 - gate).
template <typename T, typename L>
void moe_shared_gate(T* gate, const L* logits, int N);
template <typename T, typename L>
void moe_shared_gate_backward(L* dlogits, const T* gate, const T* dgate, int N);

}  // namespace feast::cpu
