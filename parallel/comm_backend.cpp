#include "parallel/comm_backend.h"

#include "core/error.h"

namespace feast {

CommBackendChoice choose_comm_backend(const std::string& requested, const std::string& device, bool nccl_usable,
                                      const std::string& nccl_why, bool gpu_shared) {
  const std::string shared = "several ranks share a GPU, which NCCL refuses";
  if (device == "cpu") {
    if (requested == "nccl")
      throw ConfigError("parallel.backend = \"nccl\" needs training.device = \"cuda\": NCCL moves GPU memory; a CPU "
                        "run communicates through MPI (parallel.backend = \"auto\" or \"mpi\")");
    return {false, "MPI (a CPU run)"};
  }
  if (requested == "mpi") return {false, "MPI, GPU buffers staged through host memory (parallel.backend = \"mpi\")"};
  if (requested == "nccl") {
    if (!nccl_usable)
      throw ConfigError("parallel.backend = \"nccl\": " + nccl_why + "; or set parallel.backend = \"mpi\" (or \"auto\")");
    if (gpu_shared)
      throw ConfigError("parallel.backend = \"nccl\": " + shared + "; give each rank its own GPU or set " +
                        "parallel.backend = \"mpi\" (or \"auto\")");
    return {true, "NCCL (parallel.backend = \"nccl\")"};
  }
  if (!nccl_usable) return {false, "MPI, GPU buffers staged through host memory: " + nccl_why};
  if (gpu_shared) return {false, "MPI, GPU buffers staged through host memory: " + shared};
  return {true, "NCCL (parallel.backend = \"auto\" on GPUs)"};
}

}  // namespace feast
