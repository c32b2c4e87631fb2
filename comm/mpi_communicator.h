// The MPI implementation of Communicator: every call is non-blocking underneath and returns a
// handle that waits under a deadline, so a rank whose peers died throws CommTimeout instead of
// hanging. Each instance owns a private communicator, so its traffic never mixes with others'.
// MPI counts are ints: a call of more elements than max_count (at most INT_MAX) is split into
// several MPI calls of at most max_count elements each, waited on as one. MPI has no bfloat16:
// bf16 data moves as 16-bit words, and reducing it is refused.
// Code that must not see MPI types gets the world through comm/mpi_world.h.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/comm_error.h"

namespace feast {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) and switches it to MPI_ERRORS_RETURN.
  // `default_timeout` bounds every wait that does not set its own; max_count (clamped to
  // INT_MAX) is the most elements one MPI call carries (tests set it small).
  MpiCommunicator(MPI_Comm comm, std::string name, std::chrono::milliseconds default_timeout, size_t max_count);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  WorkHandle allreduce(void* data, size_t count, DType dtype, const CollectiveOptions& opts = {}) override;
  WorkHandle reduce_scatter(const void* send, void* recv, std::span<const size_t> recv_counts, DType dtype,
                            const CollectiveOptions& opts = {}) override;
  WorkHandle allgather(const void* send, void* recv, std::span<const size_t> counts, DType dtype,
                       const CollectiveOptions& opts = {}) override;
  WorkHandle broadcast(void* data, size_t count, DType dtype, int root, const CollectiveOptions& opts = {}) override;
  WorkHandle alltoall(const void* send, void* recv, size_t count_per_rank, DType dtype,
                      const CollectiveOptions& opts = {}) override;
  WorkHandle alltoallv(const void* send, std::span<const size_t> send_counts, void* recv,
                       std::span<const size_t> recv_counts, DType dtype, const CollectiveOptions& opts = {}) override;
  WorkHandle send(const void* data, size_t count, DType dtype, int peer, int tag) override;
  WorkHandle recv(void* data, size_t count, DType dtype, int peer, int tag) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

 private:
  // "allreduce of 4096 float32 on group 'tp' (rank 1 of 2)": the subject of every message.
  std::string describe(const std::string& what) const;
  std::chrono::milliseconds timeout_for(const CollectiveOptions& opts) const;
  // The subject of a send or recv ("send of ... to rank 1 (tag 3) on group ..."), after checking
  // that the peer is a rank of the group and the tag is non-negative.
  std::string describe_p2p(const char* op, const char* direction, size_t count, DType dtype, int peer, int tag) const;

  friend MPI_Comm mpi_comm_of(const Communicator& c);
  MPI_Comm comm_;
  std::string name_;
  std::chrono::milliseconds default_timeout_;
  size_t max_count_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<const std::vector<int>> world_ranks_;  // the members' ranks in MPI_COMM_WORLD
};

// The MPI communicator behind `c` (for libraries that take one: parallel HDF5), or
// MPI_COMM_NULL when `c` is not an MpiCommunicator (a group of one that needs no MPI); a
// StagedCommunicator (GPU runs) answers for the communicator it wraps.
MPI_Comm mpi_comm_of(const Communicator& c);

}  // namespace feast
