#include "backend/cpu/lora.h"

#include "backend/cpu/blas.h"

namespace feast::cpu {

template <typename T>
void lora_forward(T* out, T* h, const T* inp, const T* a, const T* b, const LoraShape& s) {
  gemm(false, true, s.N, s.r, s.C, T(s.scale), inp, s.C, a, s.C, T(0), h, s.r);
  gemm(false, true, s.N, s.OC, s.r, T(1), h, s.r, b, s.r, T(1), out + s.col, s.out_ld);
}

template <typename T>
void lora_backward(T* dinp, T* da, T* db, T* h, T* dh, const T* dout, const T* inp, const T* a, const T* b,
                   const LoraShape& s) {
  const T* g = dout + s.col;
  gemm(false, true, s.N, s.r, s.C, T(s.scale), inp, s.C, a, s.C, T(0), h, s.r);
  gemm(true, false, s.OC, s.r, s.N, T(1), g, s.out_ld, h, s.r, T(1), db, s.r);
  gemm(false, false, s.N, s.r, s.OC, T(s.scale), g, s.out_ld, b, s.r, T(0), dh, s.r);
  gemm(true, false, s.r, s.C, s.N, T(1), dh, s.r, inp, s.C, T(1), da, s.C);
  if (dinp) gemm(false, false, s.N, s.C, s.r, T(1), dh, s.r, a, s.C, T(1), dinp, s.C);
}

template void lora_forward<float>(float*, float*, const float*, const float*, const float*, const LoraShape&);
template void lora_forward<double>(double*, double*, const double*, const double*, const double*, const LoraShape&);
template void lora_backward<float>(float*, float*, float*, float*, float*, const float*, const float*, const float*,
                                   const float*, const LoraShape&);
template void lora_backward<double>(double*, double*, double*, double*, double*, const double*, const double*,
                                    const double*, const double*, const LoraShape&);

}  // namespace feast::cpu
