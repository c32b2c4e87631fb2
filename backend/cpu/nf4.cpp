#include "backend/cpu/nf4.h"

#include "backend/nf4.h"

namespace feast::cpu {

void dequantize_nf4(float* out, const Nf4Piece& p) {
  const std::array<float, 16>& book = nf4_code_book();
  const auto* codes = static_cast<const uint8_t*>(p.codes.data);
  const bool dq = p.double_quant();
  const auto* absmax = static_cast<const float*>(p.scales.data);
  const auto* scale_codes = static_cast<const uint8_t*>(p.scales.data);
  const auto* absmax2 = static_cast<const float*>(p.absmax2.data);
  const auto* scale_code = static_cast<const float*>(p.scale_code.data);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < p.rows; ++i) {
    const int64_t first = (p.row0 + i) * p.width + p.col0, first_block = first / kNf4BlockSize;
    const size_t slots = size_t(i) * size_t(p.scales_per_row);
    for (int j = 0; j < p.cols; ++j) {
      const int64_t block = (first + j) / kNf4BlockSize;
      const size_t slot = slots + size_t(block - first_block);
      const float scale =
          dq ? nf4_double_quant_scale(scale_code[scale_codes[slot]], absmax2[block / kNf4GroupSize], p.offset)
             : absmax[slot];
      const size_t k = size_t(i) * size_t(p.cols) + size_t(j);
      out[k] = book[nf4_code_at(codes, k)] * scale;
    }
  }
}

}  // namespace feast::cpu
