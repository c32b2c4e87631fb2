// The communication interface every layer and the trainer use (PyTorch c10d's shape): collectives
// and point-to-point calls on one group of ranks, each returning a handle whose wait() throws if
// the work failed. Implementations (MPI, NCCL, and a wrapper that stages device buffers through host
// memory) live in parallel/; callers never see
// MPI or NCCL types. It sits in core/ because model/ needs it for tensor-parallel reductions
// while parallel/ depends on model/.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace feast {

// kBitXor: bitwise exclusive or, integer types only (checksums combine with it).
enum class ReduceOp { kSum, kMax, kBitXor };

struct CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
  // How long wait() may block before it throws CommTimeout naming the call and group; zero
  // means the communicator's default (its watchdog).
  std::chrono::milliseconds timeout{0};
  // Measure the operation's own duration where it runs (Work::device_seconds); on a GPU this
  // costs timing events, so only callers that report the figure ask for it.
  bool timed = false;
};

// A started operation. wait() blocks until it is done and throws feast::Error (CommTimeout
// when the deadline passes) naming the call and the group. Destroying a handle that was never
// waited on waits for it.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Whether the operation has finished, without blocking: once true, wait() no longer waits on
  // other ranks (it may still move the result into place). Calling it also drives the
  // library's progress: MPI advances a non-blocking collective only inside MPI calls, so a
  // caller with work of its own tests now and then to let the operation run meanwhile. A
  // failure may throw here or be left to wait().
  virtual bool test() = 0;
  // For an operation started with CollectiveOptions::timed, after wait(): how long it ran
  // where it ran (a GPU stream's time between events), in seconds; negative when only the
  // caller's clock can tell (MPI runs inside the calls that test and wait on it).
  virtual double device_seconds() const { return -1; }
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // rank within this group
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "tp", "dp", ... for messages

  // In place: data (count) becomes the reduction over the group. Reductions of bfloat16 round
  // every partial result to bfloat16, as NCCL does.
  virtual WorkHandle allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts = {}) = 0;

  // send holds the concatenation of size() blocks, block r having recv_counts[r] elements;
  // rank r receives the reduction of block r in recv (recv_counts[rank()] elements). recv may
  // be this rank's own block of send (in place; send's other blocks are then left undefined),
  // on every rank of the call or on none.
  virtual WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                                    DType dtype, const CollectiveOptions& opts = {}) = 0;

  // Rank r contributes counts[r] elements from send; recv receives every block in rank order
  // (sum of counts). send may point into recv at rank()'s own block (in place).
  virtual WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                               const CollectiveOptions& opts = {}) = 0;

  virtual WorkHandle broadcast(void* data, size_t count, DType dtype, int root,
                               const CollectiveOptions& opts = {}) = 0;

  // Personalised exchange (MPI_Alltoall): send holds size() blocks of count_per_rank elements,
  // block q going to rank q; recv receives rank q's block for this rank as its block q. send and
  // recv must be different buffers. Added after the others, so an implementation that lacks it
  // (a test's fake) inherits this one, which throws naming the group.
  virtual WorkHandle alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                              const CollectiveOptions& opts = {}) {
    (void)send, (void)recv, (void)count_per_rank, (void)dtype, (void)opts;
    throw Error("alltoall on group '" + name() + "': this communicator does not implement it");
  }

  // The same with blocks of any size (MPI_Alltoallv): send holds size() blocks, block q of
  // send_counts[q] elements going to rank q; recv receives rank q's block for this rank, of
  // recv_counts[q] elements, as its block q (blocks packed in rank order). Every rank's
  // send_counts[q] must equal rank q's recv_counts for it: exchange the counts first (alltoall).
  // Throws, naming the group, where not implemented.
  virtual WorkHandle alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                               std::span<const size_t> recv_counts, DType dtype, const CollectiveOptions& opts = {}) {
    (void)send, (void)send_counts, (void)recv, (void)recv_counts, (void)dtype, (void)opts;
    throw Error("alltoallv on group '" + name() + "': this communicator does not implement it");
  }

  // Point-to-point with a peer given as a rank of this group; tags keep micro-batches apart.
  virtual WorkHandle send(const void* data, size_t count, DType dtype, int peer, int tag) = 0;
  virtual WorkHandle recv(void* data, size_t count, DType dtype, int peer, int tag) = 0;
  // A send to `to` and a receive from `from` that proceed together (a ring shift, or a pipeline
  // stage passing one tensor on while taking another): a library that runs a group's transfers
  // one after another (NCCL) must be told they go together, or a receive queued before its
  // matching send deadlocks. This one posts both and waits for both. Tags as for send and recv.
  virtual WorkHandle sendrecv(const void* send_data, size_t send_count, int to, int send_tag, void* recv_data,
                              size_t recv_count, int from, int recv_tag, DType dtype);

  virtual void barrier() = 0;

  // A sub-communicator of the ranks that pass the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
};

// Waits for both halves of a default sendrecv (the receive first).
class PairedWork final : public Work {
 public:
  PairedWork(WorkHandle first, WorkHandle second) : first_(std::move(first)), second_(std::move(second)) {}
  bool test() override {
    const bool first = first_->test();  // both, so that both make progress
    return second_->test() && first;
  }
  void wait() override {
    first_->wait();
    second_->wait();
  }

 private:
  WorkHandle first_, second_;
};

inline WorkHandle Communicator::sendrecv(const void* send_data, size_t send_count, int to, int send_tag,
                                         void* recv_data, size_t recv_count, int from, int recv_tag, DType dtype) {
  WorkHandle rx = recv(recv_data, recv_count, dtype, from, recv_tag);
  WorkHandle tx = send(send_data, send_count, dtype, to, send_tag);
  return std::make_unique<PairedWork>(std::move(rx), std::move(tx));
}

// Convenience for the common blocking float/double all-reduce.
inline void allreduce_sum(Communicator& c, float* data, size_t count) {
  c.allreduce(data, count, DType::kFloat32)->wait();
}
inline void allreduce_sum(Communicator& c, double* data, size_t count) {
  c.allreduce(data, count, DType::kFloat64)->wait();
}

}  // namespace feast
