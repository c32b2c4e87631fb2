// bfloat16 <-> float conversions shared by both backends (FEAST_HD): the top 16 bits of an IEEE
// float, rounded to nearest-even as PyTorch and CUDA's __float2bfloat16 round. The CPU's cast op
// and the tests use these, so a GPU kernel that calls them rounds exactly as the CPU does.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace feast {

FEAST_HD uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

FEAST_HD float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace feast
