#include "backend/cpu/encoder.h"

#include <cstddef>

namespace feast::cpu {

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C,
                     int vocab_begin, int vocab_end, const int32_t* positions) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    T* o = out + static_cast<size_t>(bt) * C;
    const int tok = tokens[bt];
    if (tok >= vocab_begin && tok < vocab_end) {
      const T* e = wte + static_cast<size_t>(tok - vocab_begin) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = T(0);
    }
    if (wpe) {
      const T* p = wpe + static_cast<size_t>(positions ? positions[bt] : bt % Tn) * C;
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                      int vocab_begin, int vocab_end, const int32_t* positions) {
  constexpr int kBlock = 64;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int bt = 0; bt < B * Tn; ++bt) {
      const T* d = dout + static_cast<size_t>(bt) * C;
      const int tok = tokens[bt];
      if (tok >= vocab_begin && tok < vocab_end) {
        T* e = dwte + static_cast<size_t>(tok - vocab_begin) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
      if (dwpe) {
        T* p = dwpe + static_cast<size_t>(positions ? positions[bt] : bt % Tn) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  }
}

template void encoder_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int, int, int, const int32_t*);
template void encoder_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int, int, int, const int32_t*);
template void encoder_backward<float>(float*, float*, const float*, const int32_t*, int, int, int, int, int, const int32_t*);
template void encoder_backward<double>(double*, double*, const double*, const int32_t*, int, int, int, int, int, const int32_t*);

}  // namespace feast::cpu
