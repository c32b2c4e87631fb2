// The tensor-parallel group as the model layers see it: the collectives behind Megatron-LM's
// conjugate operators (mappings.py), which model/layers/layer_context.h applies for every
// layer. Without sequence parallelism a row-parallel layer's partial outputs are summed in the
// forward (reduce-from-tp; identity backward) and a column-parallel layer's partial input
// gradients in the backward (copy-to-tp; identity forward): all-reduces. The vocabulary-
// parallel loss reduces its statistics through it too. With tp = 1 every call is a no-op. It
// also times its communication for the per-step time split.
// With sequence parallelism (Korthikanti et al. 2022; parallel.sequence_parallel) the regions
// between the tensor-parallel products (norms, residual sums) hold 1/tp of a micro-batch's
// rows on each rank: rank r holds rows [r N/tp, (r+1) N/tp) of the (B*T, C) row order, which
// for one sequence per micro-batch is its r-th piece of the sequence (every such region works
// row by row, so any split of the rows computes the same). Those sums become reduce-scatters of
// rows (reduce-scatter-to-sp's forward, gather-from-sp's backward) and a column-parallel
// layer's input an all-gather of rows (gather-from-sp's forward, reduce-scatter-to-sp's
// backward): the same bytes as the all-reduce they replace, since a ring all-reduce is a
// reduce-scatter and an all-gather.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "core/timer.h"

namespace feast {

class TensorParallel {
 public:
  // group: the tensor-parallel communicator, null when size == 1. sequence_parallel needs
  // size > 1.
  TensorParallel(Communicator* group, int rank, int size, bool sequence_parallel = false);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // The rows of a sequence-parallel region on this rank, out of a micro-batch's N (all N
  // without sequence parallelism).
  int local_rows(int N) const { return sequence_parallel_ ? N / size_ : N; }

  // In place over the group.
  void allreduce(const TensorView& x, ReduceOp op);
  // Sequence parallelism's two collectives on (rows, C) tensors: full holds N rows, local this
  // rank's N/tp of them. full = every rank's local rows, in rank order:
  void gather_rows(const TensorView& local, const TensorView& full, int N, int C);
  // local = this rank's rows of the sum over ranks of full.
  void reduce_scatter_rows(const TensorView& full, const TensorView& local, int N, int C);

  // Seconds spent communicating since the last call.
  double take_seconds();

 private:
  // Each rank's share of N rows of C: the counts of a collective over the rows; throws when tp
  // does not divide N.
  std::vector<size_t> row_blocks(int N, int C, const char* what) const;
  // Waits for `work` and adds its time to seconds_.
  void finish(const WorkHandle& work, const Timer& started);

  Communicator* group_;
  int rank_, size_;
  bool sequence_parallel_;
  double seconds_ = 0;
};

}  // namespace feast
