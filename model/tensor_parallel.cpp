#include "model/tensor_parallel.h"

#include "core/error.h"
#include "core/timer.h"

namespace feast {

TensorParallel::TensorParallel(Communicator* group, int rank, int size, Stream* compute)
    : group_(group), rank_(rank), size_(size), compute_(compute) {
  FEAST_CHECK(size == 1 || (group && group->size() == size),
              "a tensor-parallel stage of degree " << size << " needs its tp communicator");
}

void TensorParallel::allreduce(const TensorView& x, ReduceOp op) {
  if (!group_ || size_ == 1) return;
  if (compute_) compute_->synchronize();
  Timer t;
  CollectiveOptions opts;
  opts.op = op;
  group_->allreduce(x.data, x.numel, x.dtype, opts)->wait();
  seconds_ += t.seconds();
}

double TensorParallel::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

}  // namespace feast
