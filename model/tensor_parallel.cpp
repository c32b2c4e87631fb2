#include "model/tensor_parallel.h"

#include "core/error.h"
#include "core/timer.h"

namespace feast {

TensorParallel::TensorParallel(Communicator* group, int rank, int size) : group_(group), rank_(rank), size_(size) {
  FEAST_CHECK(size == 1 || (group && group->size() == size),
              "a tensor-parallel stage of degree " << size << " needs its tp communicator");
}

void TensorParallel::allreduce(const TensorView& x, ReduceOp op) {
  if (!group_ || size_ == 1) return;
  Timer t;
  CollectiveOptions opts;
  opts.op = op;
  // On a GPU the host's wait also covers the compute queued before the all-reduce; NCCL's own
  // time for it (from events) leaves that to the forward or backward it sits in.
  opts.timed = true;
  const WorkHandle work = group_->allreduce(x.data, x.numel, x.dtype, opts);
  work->wait();
  const double own = work->device_seconds();
  seconds_ += own >= 0 ? own : t.seconds();
}

double TensorParallel::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

}  // namespace feast
