// FEAST_HD marks scalar math that both backends share (GELU, the AdamW update, the RNG): the
// CPU tests then exercise the GPU's formulas too. Such code may call only what both sides
// have: float_from_bits stands in for std::bit_cast, which device code cannot call.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define FEAST_HD __host__ __device__ __forceinline__
#else
#define FEAST_HD inline
#endif

namespace feast {

// The float whose IEEE bits are `bits`.
FEAST_HD float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

}  // namespace feast
