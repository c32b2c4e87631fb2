#include "backend/cpu/cast.h"

#include "core/bfloat16.h"

namespace feast::cpu {

void cast_float_to_bf16(uint16_t* out, const float* inp, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) out[i] = float_to_bf16(inp[i]);
}

void cast_bf16_to_float(float* out, const uint16_t* inp, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) out[i] = bf16_to_float(inp[i]);
}

}  // namespace feast::cpu
