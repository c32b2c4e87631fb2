// What LayerNorm and RMSNorm share: the block size of their per-row kernels, and the two-stage
// column sums of their parameter gradients (per row-group partial sums in scratch, then the
// partials of groups 0, 1, ... added in order), which need no atomics and give the same result
// every run. The bias gradient (matmul.cu) uses the second stage too.
#pragma once

#include <algorithm>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/kernel_common.cuh"

namespace feast::cuda {

// The most threads a per-row kernel runs. The kernels declare it (__launch_bounds__), so the
// compiler keeps their registers within what a block this large may use; without that, a wide
// row's launch could fail for want of registers.
constexpr unsigned int kMaxRowThreads = 1024;

// Threads per row: about 8 channels each, in whole warps, at most kMaxRowThreads.
inline unsigned int row_threads(int C) {
  const unsigned int warps = blocks_for(blocks_for(static_cast<size_t>(C), 8u), 32u);
  return std::min(kMaxRowThreads, std::max(1u, warps) * 32u);
}

// Stage 1 runs blocks of (kColumns, kRowLanes) threads over a grid of (column chunks, row
// groups): a warp reads kColumns consecutive channels of a row (coalesced), the block's
// kRowLanes warps take every kRowLanes-th row of the group, and their sums are added in lane order.
constexpr int kColumns = 32;
constexpr int kRowLanes = 8;

// The split of N rows into groups: about kTargetBlocks stage-1 blocks, enough to fill a device
// several times over and few enough that the partials stay small. It depends on the shape only,
// so the sums do not change with the device.
struct ColumnSumSplit {
  unsigned int chunks = 1;  // gridDim.x: column chunks of kColumns
  int rows_per_group = 1;
  int groups = 1;           // gridDim.y (at most kTargetBlocks)
};

inline ColumnSumSplit column_sum_split(int N, int C) {
  constexpr unsigned int kTargetBlocks = 1024;
  ColumnSumSplit s;
  s.chunks = blocks_for(C, kColumns);
  const unsigned int max_groups = blocks_for(N, kRowLanes);  // at least a row per row lane
  const unsigned int wanted_groups = std::min(max_groups, std::max(1u, kTargetBlocks / s.chunks));
  s.rows_per_group = static_cast<int>(blocks_for(N, wanted_groups));
  s.groups = static_cast<int>(blocks_for(N, s.rows_per_group));  // none left empty
  return s;
}

// Stage 2: dst[c] += the partials (groups, C) of groups 0, 1, ... in order (norm_common.cu).
void add_column_partials(const CudaContext& ctx, float* dst, const float* partials, int groups, int C);

}  // namespace feast::cuda
