#include "model/tensor_parallel.h"

#include <vector>

#include "core/error.h"

namespace feast {

TensorParallel::TensorParallel(Communicator* group, int rank, int size, bool sequence_parallel)
    : group_(group), rank_(rank), size_(size), sequence_parallel_(sequence_parallel) {
  FEAST_CHECK(size == 1 || (group && group->size() == size),
              "a tensor-parallel stage of degree " << size << " needs its tp communicator");
  FEAST_CHECK(!sequence_parallel || size > 1, "sequence parallelism needs a tensor-parallel degree above 1");
}

void TensorParallel::finish(const WorkHandle& work, const Timer& started) {
  work->wait();
  const double own = work->device_seconds();
  seconds_ += own >= 0 ? own : started.seconds();
}

namespace {

// On a GPU the host's wait also covers the compute queued before the collective; NCCL's own
// time for it (from events) leaves that to the forward or backward it sits in.
CollectiveOptions timed(ReduceOp op) {
  CollectiveOptions opts;
  opts.op = op;
  opts.timed = true;
  return opts;
}

}  // namespace

std::vector<size_t> TensorParallel::row_blocks(int N, int C, const char* what) const {
  FEAST_CHECK(sequence_parallel_ && N % size_ == 0,
              "a sequence-parallel " << what << " of " << N << " rows over " << size_ << " ranks");
  return std::vector<size_t>(size_t(size_), size_t(N / size_) * size_t(C));
}

void TensorParallel::gather_rows(const TensorView& local, const TensorView& full, int N, int C) {
  const std::vector<size_t> counts = row_blocks(N, C, "all-gather");
  const Timer t;
  finish(group_->allgather(local.data, full.data, counts, full.dtype, timed(ReduceOp::kSum)), t);
}

void TensorParallel::reduce_scatter_rows(const TensorView& full, const TensorView& local, int N, int C) {
  const std::vector<size_t> counts = row_blocks(N, C, "reduce-scatter");
  const Timer t;
  finish(group_->reduce_scatter(full.data, local.data, counts, full.dtype, timed(ReduceOp::kSum)), t);
}

void TensorParallel::allreduce(const TensorView& x, ReduceOp op) {
  if (!group_ || size_ == 1) return;
  const Timer t;
  finish(group_->allreduce(x.data, x.numel, x.dtype, timed(op)), t);
}

double TensorParallel::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

}  // namespace feast
