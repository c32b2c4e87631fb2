// Which library carries a run's GPU tensors (parallel.backend): NCCL or MPI with device buffers
// staged through host memory. A pure decision, so it is tested without GPUs; TrainingRun makes
// every rank take the same one.
#pragma once

#include <string>
#include <vector>

#include "comm/topology/gpu_links.h"

namespace feast {

struct CommBackendChoice {
  bool nccl = false;
  std::string why;  // for the start-up report: "NCCL 2.28.9", "2 ranks share a GPU: NCCL refuses that"
};

// Collective over `world`: every rank's GPU UUID (which physical GPU it drives, whatever
// CUDA_VISIBLE_DEVICES calls it), indexed by world rank.
class Communicator;
std::vector<GpuUuid> gather_gpu_uuids(Communicator& world);
// Whether two ranks drive the same GPU, which NCCL refuses.
bool some_gpu_is_shared(const std::vector<GpuUuid>& uuids);

// requested: parallel.backend ("auto", "nccl", "mpi"); device: training.device. nccl_usable and
// nccl_why: whether NCCL is built and loads, and if not why; gpu_shared: some GPU serves more
// than one rank of the job. Throws ConfigError naming parallel.backend when "nccl" is asked
// for and cannot be had on the GPUs (the config already refuses it on the CPU).
CommBackendChoice choose_comm_backend(const std::string& requested, const std::string& device, bool nccl_usable,
                                      const std::string& nccl_why, bool gpu_shared);

}  // namespace feast
