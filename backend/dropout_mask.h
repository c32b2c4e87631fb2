// LoRA dropout's mask (PEFT's lora_dropout: nn.Dropout on an adapter's input), shared by the CPU
// and CUDA kernels. Whether an element is kept is a pure function of the adapter's stream for
// the step and the element's place in the whole step: its row's global index in the step's batch
// of sequences and its column in the whole (tensor-unsplit) input. So every layout (tensor,
// sequence, pipeline and data parallelism, any micro-batch split) drops the same elements, and
// the backward (or a recomputed forward) draws the same mask again instead of keeping it.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/rng.h"

namespace feast {

// One dropout call on an (N, C) input: N = B T rows of B whole sequences, C columns of a product
// whose whole input is `columns` wide, starting at col0 (a row-parallel product's rank holds a
// slice of them).
struct DropoutShape {
  int N = 0, C = 0;
  int T = 1;                    // rows per sequence
  int64_t first_sequence = 0;   // the step's global index of row 0's sequence
  int col0 = 0, columns = 0;
  uint64_t stream = 0;          // the adapter's, for this step (model/lora.h: lora_dropout_stream)
  float p = 0;                  // the probability of dropping; kept elements are scaled by 1 / (1 - p)
};

// The draws of a row come from one hash of (stream, the row's global index), and each pair of
// columns (2j, 2j + 1) shares one mix of it with j: column 2j takes bits 8..31 of the mix, 2j + 1
// its top 24 bits. An element is kept when its 24-bit draw is at least p * 2^24. (A mix per pair
// of elements keeps the CPU's cost a fraction of a full hash per element.)
FEAST_HD uint64_t dropout_row_stream(const DropoutShape& s, int row) {
  const uint64_t global_row = uint64_t(s.first_sequence + row / s.T) * uint64_t(s.T) + uint64_t(row % s.T);
  return hash_combine(s.stream, global_row);
}
FEAST_HD uint64_t dropout_pair_bits(uint64_t row_stream, int64_t global_col) {
  return mix64(row_stream + uint64_t(global_col >> 1));
}
FEAST_HD uint32_t dropout_draw(uint64_t pair_bits, int64_t global_col) {
  return static_cast<uint32_t>((global_col & 1) ? pair_bits >> 40 : (pair_bits >> 8) & 0xFFFFFFu);
}
FEAST_HD uint32_t dropout_threshold(float p) { return static_cast<uint32_t>(p * 16777216.0f); }

// Whether element (row, col) of the call is kept.
FEAST_HD bool dropout_keeps(const DropoutShape& s, int row, int col) {
  const int64_t global_col = int64_t(s.col0) + col;
  return dropout_draw(dropout_pair_bits(dropout_row_stream(s, row), global_col), global_col) >=
         dropout_threshold(s.p);
}

// What a kept element is multiplied by (float32, as torch's dropout scales).
FEAST_HD float dropout_scale(float p) { return 1.0f / (1.0f - p); }

}  // namespace feast
