// The tensor-parallel group as the model layers see it, with Megatron's conjugate operators
// named (Megatron-LM's mappings.py): reduce-from-tp sums the partial outputs of a row-parallel
// layer in the forward (its backward is the identity); copy-to-tp is the identity in the
// forward and sums the partial input gradients of a column-parallel layer in the backward. The
// vocabulary-parallel loss reduces its statistics through it too. With tp = 1 every call is a
// no-op. It also times its communication for the per-step time split.
// With sequence parallelism (Korthikanti et al. 2022; parallel.sequence_parallel) the regions
// between the tensor-parallel products (norms, residual sums) hold 1/tp of a micro-batch's
// rows on each rank: rank r holds rows [r N/tp, (r+1) N/tp) of the (B*T, C) row order, which
// for one sequence per micro-batch is its r-th piece of the sequence (every such region works
// row by row, so any split of the rows computes the same). The all-reduce of a row-parallel
// layer becomes a reduce-scatter of rows and the input of a column-parallel layer an all-gather
// of rows, each with the other as its backward (Megatron-LM's
// gather_from_sequence_parallel_region and reduce_scatter_to_sequence_parallel_region): the same
// bytes as the all-reduce they replace, since a ring all-reduce is a reduce-scatter and an
// all-gather.
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

  // Forward of reduce-from-tp: x becomes the sum of every rank's partial x.
  void reduce_from_tp_forward(const TensorView& x) { allreduce(x, ReduceOp::kSum); }
  // Backward of copy-to-tp: dx becomes the sum of every rank's partial dx.
  void copy_to_tp_backward(const TensorView& dx) { allreduce(dx, ReduceOp::kSum); }
  // In place over the group.
  void allreduce(const TensorView& x, ReduceOp op);

  // Sequence parallelism's conjugate pair on (rows, C) tensors: full holds N rows, local this
  // rank's N/tp of them.
  // Forward of gather-from-sp (a column-parallel layer's input), backward of
  // reduce-scatter-to-sp: full = every rank's local rows, in rank order.
  void gather_from_sp_forward(const TensorView& local, const TensorView& full, int N, int C) {
    gather_rows(local, full, N, C);
  }
  void reduce_scatter_to_sp_backward(const TensorView& dlocal, const TensorView& dfull, int N, int C) {
    gather_rows(dlocal, dfull, N, C);
  }
  // Forward of reduce-scatter-to-sp (a row-parallel layer's output), backward of
  // gather-from-sp: local = this rank's rows of the sum over ranks of full.
  void reduce_scatter_to_sp_forward(const TensorView& full, const TensorView& local, int N, int C) {
    reduce_scatter_rows(full, local, N, C);
  }
  void gather_from_sp_backward(const TensorView& dfull, const TensorView& dlocal, int N, int C) {
    reduce_scatter_rows(dfull, dlocal, N, C);
  }

  // Seconds spent communicating since the last call.
  double take_seconds();

 private:
  // Each rank's share of N rows of C: the counts of a collective over the rows; throws when tp
  // does not divide N.
  std::vector<size_t> row_blocks(int N, int C, const char* what) const;
  void gather_rows(const TensorView& local, const TensorView& full, int N, int C);
  void reduce_scatter_rows(const TensorView& full, const TensorView& local, int N, int C);
  // Waits for `work` and adds its time to seconds_.
  void finish(const WorkHandle& work, const Timer& started);

  Communicator* group_;
  int rank_, size_;
  bool sequence_parallel_;
  double seconds_ = 0;
};

}  // namespace feast
