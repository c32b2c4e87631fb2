#include "parallel/comm_backend.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/communicator.h"
#include "core/device_info.h"
#include "core/error.h"

namespace feast {

bool some_gpu_is_shared(Communicator& world) {
  const std::array<uint8_t, 16> uuid = cuda_device_uuid();
  const size_t n = size_t(world.size()), me = size_t(world.rank());
  std::vector<int32_t> uuids(4 * n);
  std::memcpy(uuids.data() + 4 * me, uuid.data(), uuid.size());
  const std::vector<size_t> counts(n, 4);
  world.allgather(uuids.data() + 4 * me, uuids.data(), counts, DType::kInt32)->wait();
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b)
      if (std::equal(uuids.begin() + long(4 * a), uuids.begin() + long(4 * a + 4), uuids.begin() + long(4 * b))) return true;
  return false;
}

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
