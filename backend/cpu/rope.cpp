#include "backend/cpu/rope.h"

#include <cstddef>
#include <cstdint>

namespace feast::cpu {
namespace {

// sign = +1 rotates forward, -1 back.
template <typename T>
void rotate(T* qkv, const T* cos, const T* sin, int B, int Tn, int NH, int NKV, int hs, const int32_t* positions,
            T sign) {
  const int W = (NH + 2 * NKV) * hs, half = hs / 2, heads = NH + NKV;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    const int t = positions ? positions[bt] : bt % Tn;
    const T* c = cos + static_cast<size_t>(t) * half;
    const T* s = sin + static_cast<size_t>(t) * half;
    T* row = qkv + static_cast<size_t>(bt) * W;
    for (int h = 0; h < heads; ++h) {
      T* x = row + h * hs;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const T a = x[i], b = x[i + half], si = sign * s[i];
        x[i] = a * c[i] - b * si;
        x[i + half] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, const T* cos, const T* sin, int B, int Tn, int NH, int NKV, int hs, const int32_t* positions) {
  rotate(qkv, cos, sin, B, Tn, NH, NKV, hs, positions, T(1));
}

template <typename T>
void rope_backward(T* dqkv, const T* cos, const T* sin, int B, int Tn, int NH, int NKV, int hs,
                   const int32_t* positions) {
  rotate(dqkv, cos, sin, B, Tn, NH, NKV, hs, positions, T(-1));
}

template void rope_forward<float>(float*, const float*, const float*, int, int, int, int, int, const int32_t*);
template void rope_forward<double>(double*, const double*, const double*, int, int, int, int, int, const int32_t*);
template void rope_backward<float>(float*, const float*, const float*, int, int, int, int, int, const int32_t*);
template void rope_backward<double>(double*, const double*, const double*, int, int, int, int, int, const int32_t*);

}  // namespace feast::cpu
