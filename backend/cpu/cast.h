// Element type conversion on the CPU: float32 <-> bfloat16 (rounded to nearest-even by the
// shared core/bfloat16.h) and float32 -> float32 (a copy). Master weights use it to refresh
// lower-precision compute parameters after an update.
#pragma once

#include <cstddef>
#include <cstdint>

namespace feast::cpu {

void cast_float_to_bf16(uint16_t* out, const float* inp, size_t n);
void cast_bf16_to_float(float* out, const uint16_t* inp, size_t n);

}  // namespace feast::cpu
