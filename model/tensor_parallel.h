// The tensor-parallel group as the model layers see it, with Megatron's conjugate operators
// named (Megatron-LM's mappings.py): reduce-from-tp sums the partial outputs of a row-parallel
// layer in the forward (its backward is the identity); copy-to-tp is the identity in the
// forward and sums the partial input gradients of a column-parallel layer in the backward. The
// vocabulary-parallel loss reduces its statistics through it too. With tp = 1 every call is a
// no-op. It also times its communication for the per-step time split.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

namespace feast {

class TensorParallel {
 public:
  // group: the tensor-parallel communicator, null when size == 1.
  TensorParallel(Communicator* group, int rank, int size);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Forward of reduce-from-tp: x becomes the sum of every rank's partial x.
  void reduce_from_tp_forward(const TensorView& x) { allreduce(x, ReduceOp::kSum); }
  // Backward of copy-to-tp: dx becomes the sum of every rank's partial dx.
  void copy_to_tp_backward(const TensorView& dx) { allreduce(dx, ReduceOp::kSum); }
  // In place over the group.
  void allreduce(const TensorView& x, ReduceOp op);

  // Seconds spent communicating since the last call.
  double take_seconds();

 private:
  Communicator* group_;
  int rank_, size_;
  double seconds_ = 0;
};

}  // namespace feast
