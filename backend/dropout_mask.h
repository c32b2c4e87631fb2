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

// Whether element (row, col) of the call is kept: a 24-bit draw at or above p * 2^24.
FEAST_HD bool dropout_keeps(const DropoutShape& s, int row, int col) {
  const uint64_t global_row = uint64_t(s.first_sequence + row / s.T) * uint64_t(s.T) + uint64_t(row % s.T);
  const uint64_t key = global_row * uint64_t(s.columns) + uint64_t(s.col0 + col);
  const auto draw = static_cast<uint32_t>(hash_combine(s.stream, key) >> 40);
  return draw >= static_cast<uint32_t>(s.p * 16777216.0f);
}

// What a kept element is multiplied by (float32, as torch's dropout scales).
FEAST_HD float dropout_scale(float p) { return 1.0f / (1.0f - p); }

}  // namespace feast
