// Rotary position embedding on the CPU in Hugging Face's rotate-half layout: in every query and
// key head, channel i < hs/2 pairs with channel i + hs/2 and the pair turns by the angle
// t * inv_freq[i] of its position t. Applied in place to the q and k heads of the fused QKV
// activation. Legend: B batch, T time, NH query heads, NKV key/value heads, hs head size,
// W = (NH + 2 NKV) hs the width of a QKV row.
#pragma once

#include <cstdint>

namespace feast::cpu {

// cos, sin (maxT, hs/2): row t holds cos and sin of t * inv_freq[i] (model/rope.h makes them).
// Rotates the NH + NKV q and k heads of qkv (B, T, W) in place:
// (x_i, x_{i+hs/2}) -> (x_i cos - x_{i+hs/2} sin, x_{i+hs/2} cos + x_i sin). A row's angle is
// that of its position: t, or positions[b T + t] when given (document masks: its place in its
// document).
template <typename T>
void rope_forward(T* qkv, const T* cos, const T* sin, int B, int Tn, int NH, int NKV, int hs,
                  const int32_t* positions = nullptr);

// The backward: the rotation is orthogonal, so the gradient turns back by the same angle
// (the transpose, sin negated), in place on dqkv's q and k heads.
template <typename T>
void rope_backward(T* dqkv, const T* cos, const T* sin, int B, int Tn, int NH, int NKV, int hs,
                   const int32_t* positions = nullptr);

}  // namespace feast::cpu
