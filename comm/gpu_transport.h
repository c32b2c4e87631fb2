// Which library carries GPU tensors between ranks, chosen alike on every rank by the transport
// policy (transport_policy.h), and the process groups wired to it: NCCL communicators ordered
// after the compute stream, or MPI with device buffers staged through pinned host memory.
// Training and `trainer bench comm` both wire their groups here.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace feast {

struct ProcessGroups;

struct GpuTransportRequest {
  std::string backend = "auto";  // parallel.backend: "auto", "nccl" or "mpi"
  void* stream = nullptr;        // the compute stream (cudaStream_t) NCCL orders its work after
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // NCCL's initialisation and calls
  std::string log_dir;           // where rank 0 keeps NCCL's lines about its network ("": not kept)
  // A parameter server's data-parallel group posts transfers both ways at once, which NCCL
  // would serialise into a deadlock: it stays on MPI.
  bool dp_stays_on_mpi = false;
  // Interleaved 1F1B's transfers are not paired into exchanges (schedule.h), and NCCL, which
  // runs a group's sends and receives in order, could wait in a cycle: the pipeline stays on MPI.
  bool pp_stays_on_mpi = false;
};

// Collective over groups.world: every group stages device buffers through host memory; then the
// tensor-parallel, data-parallel, pipeline and tied-embedding groups of more than one rank move
// to NCCL when the policy chooses it (the world and host values stay on MPI). Prints what was
// chosen and why, and the network NCCL uses between nodes. Throws ConfigError naming
// parallel.backend when "nccl" is asked for and cannot be had.
void connect_gpu_groups(ProcessGroups& groups, const GpuTransportRequest& request);

// One communicator wired the same way: through NCCL when request.backend is "nccl", else MPI
// staged through host memory. Throws ConfigError when NCCL cannot be had.
std::unique_ptr<Communicator> connect_gpu_world(std::unique_ptr<Communicator> world,
                                                const GpuTransportRequest& request);

}  // namespace feast
