// 4-bit NormalFloat (NF4; Dettmers et al. 2023, "QLoRA") as bitsandbytes stores it: a tensor's
// elements in row-major order, in blocks of 64, each block scaled by its largest magnitude
// (absmax) and each scaled value replaced by the nearest of 16 fixed values, two codes a byte.
// Double quantization stores the blocks' absmax values themselves in 8 bits: their mean is
// subtracted (the offset), and the rest is quantized in groups of 256 blocks with bitsandbytes'
// signed dynamic map and one float32 scale (absmax2) per group. This is the published algorithm
// of bitsandbytes' quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=...) and
// dequantize_4bit; tests/fixtures/hf/qlora/make_qlora_fixtures.py writes it in numpy, and the
// unit tests hold this code to that fixture bit for bit. Quantization runs once, on the host, as
// the base is loaded (model/quantized_base.h); Backend::dequantize_nf4 undoes it on the device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace feast {

constexpr int kNf4BlockSize = 64;   // elements per absmax scale
constexpr int kNf4GroupSize = 256;  // scales per second-level scale (double quantization)

// The 16 values of the NF4 code book, ascending from -1 to 1 (bitsandbytes' get_4bit_type("nf4")).
const std::array<float, 16>& nf4_code_book();
// The 256 values of bitsandbytes' create_dynamic_map(signed=True), ascending: the 8-bit code
// double quantization stores the scales in (torch.linspace's float32 arithmetic reproduced).
const std::array<float, 256>& nf4_scale_code();

// A tensor quantized whole.
struct Nf4Tensor {
  size_t numel = 0;
  // (numel + 1) / 2 bytes: element 2i in the high nibble of byte i, element 2i + 1 in the low.
  std::vector<uint8_t> codes;
  // Single quantization: each block's absmax. Double quantization: empty.
  std::vector<float> absmax;
  // Double quantization: per block, the index into nf4_scale_code() of (absmax - offset) /
  // absmax2[block / 256]; per group of 256 blocks its largest |absmax - offset|; and the offset,
  // the mean of the blocks' absmax (summed in float64, rounded to float32).
  std::vector<uint8_t> absmax_codes;
  std::vector<float> absmax2;
  float offset = 0;
  bool double_quant = false;

  size_t blocks() const { return (numel + kNf4BlockSize - 1) / kNf4BlockSize; }
  uint8_t code(size_t i) const;
  // What dequantization multiplies block b's code values by: absmax[b], or under double
  // quantization scale_code[absmax_codes[b]] * absmax2[b / 256] + offset, in float32 steps.
  float scale(size_t block) const;
  // Element i dequantized: code_book[code(i)] * scale(i / 64) in float32.
  float value(size_t i) const;
};

// Code k of codes packed two a byte, the first in the high nibble; and packing one there (the
// byte's other nibble kept).
FEAST_HD uint8_t nf4_code_at(const uint8_t* codes, size_t k) {
  return k % 2 == 0 ? uint8_t(codes[k / 2] >> 4) : uint8_t(codes[k / 2] & 15);
}
inline void nf4_put_code(uint8_t* codes, size_t k, uint8_t q) { codes[k / 2] |= k % 2 == 0 ? uint8_t(q << 4) : q; }

// A double-quantized block's scale from its 8-bit code's value: code_value * absmax2 + offset in
// two rounded float32 steps, never one fused multiply-add, as bitsandbytes computes it; every
// backend and the host reference dequantize through this.
FEAST_HD float nf4_double_quant_scale(float code_value, float absmax2, float offset) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(code_value, absmax2), offset);
#else
  const float scaled = code_value * absmax2;
  return scaled + offset;
#endif
}

// The scale slots each row of a rectangle keeps (Nf4Piece::scales_per_row): the most blocks of 64
// any of its rows touches, rows of cols elements from (row0, col0) of a tensor `width` wide.
int nf4_scales_per_row(int64_t row0, int64_t col0, int64_t width, int rows, int cols);

// values[0, numel) quantized in blocks of 64. A block of zeros has absmax 0; its codes are those
// of NaN in bitsandbytes' arithmetic (index 0), and it dequantizes to zeros all the same.
Nf4Tensor quantize_nf4(const float* values, size_t numel, bool double_quant);

// The share of a quantized tensor `width` wide that a rectangle of it holds, laid out as
// Backend::dequantize_nf4 reads it (Nf4Piece): the rectangle's codes packed row-major, and each
// row's scales (absmax, or under double quantization their 8-bit codes) in scales_per_row slots.
// The tensor's absmax2 and offset serve every piece of it as they are.
struct Nf4PieceData {
  std::vector<uint8_t> codes;
  std::vector<float> absmax;          // single quantization
  std::vector<uint8_t> scale_codes;   // double quantization
  int scales_per_row = 0;
};
Nf4PieceData nf4_piece_data(const Nf4Tensor& t, int64_t width, int64_t row0, int64_t col0, int rows, int cols);

}  // namespace feast
