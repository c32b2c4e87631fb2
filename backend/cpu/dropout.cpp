#include "backend/cpu/dropout.h"

#include <cstddef>
#include <cstdint>

namespace feast::cpu {
namespace {

// f(i, kept) for each element of the call, row by row: the row's hash once, and one mix per pair
// of columns (dropout_keeps' draws, without recomputing what a row and a pair share).
template <typename F>
void for_each_draw(const DropoutShape& s, F f) {
  const uint32_t threshold = dropout_threshold(s.p);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s.N; ++r) {
    const uint64_t row = dropout_row_stream(s, r);
    uint64_t bits = 0;
    for (int c = 0; c < s.C; ++c) {
      const int64_t g = int64_t(s.col0) + c;
      if (c == 0 || (g & 1) == 0) bits = dropout_pair_bits(row, g);
      f(size_t(r) * size_t(s.C) + size_t(c), dropout_draw(bits, g) >= threshold);
    }
  }
}

}  // namespace

template <typename T>
void dropout_forward(T* out, const T* inp, const DropoutShape& s) {
  const T scale = T(dropout_scale(s.p));
  for_each_draw(s, [&](size_t i, bool kept) { out[i] = kept ? inp[i] * scale : T(0); });
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, const DropoutShape& s) {
  const T scale = T(dropout_scale(s.p));
  for_each_draw(s, [&](size_t i, bool kept) {
    if (kept) dinp[i] += dout[i] * scale;
  });
}

template void dropout_forward<float>(float*, const float*, const DropoutShape&);
template void dropout_forward<double>(double*, const double*, const DropoutShape&);
template void dropout_backward<float>(float*, const float*, const DropoutShape&);
template void dropout_backward<double>(double*, const double*, const DropoutShape&);

}  // namespace feast::cpu
