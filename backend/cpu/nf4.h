// Dequantization of a 4-bit NormalFloat piece on the CPU (Backend::dequantize_nf4): one pass
// over the rectangle's rows, a row's scales looked up once per block.
#pragma once

#include "backend/backend.h"

namespace feast::cpu {

// out (rows, cols) float32 = the piece dequantized; the piece's views are host memory.
void dequantize_nf4(float* out, const Nf4Piece& piece);

}  // namespace feast::cpu
