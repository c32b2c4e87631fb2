#include "comm/transport_policy.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "core/device_info.h"
#include "core/error.h"

namespace feast {

std::vector<GpuUuid> gather_gpu_uuids(Communicator& world) {
  const size_t n = size_t(world.size()), me = size_t(world.rank());
  std::vector<int32_t> words(4 * n);  // four int32 words per UUID
  const GpuUuid mine = cuda_device_uuid();
  std::memcpy(words.data() + 4 * me, mine.data(), mine.size());
  world.allgather(words.data() + 4 * me, words.data(), std::vector<size_t>(n, 4), DType::kInt32)->wait();
  std::vector<GpuUuid> uuids(n);
  for (size_t r = 0; r < n; ++r) std::memcpy(uuids[r].data(), words.data() + 4 * r, 16);
  return uuids;
}

bool some_gpu_is_shared(const std::vector<GpuUuid>& uuids) {
  for (size_t a = 0; a < uuids.size(); ++a)
    for (size_t b = a + 1; b < uuids.size(); ++b)
      if (uuids[a] == uuids[b]) return true;
  return false;
}

CommBackendChoice choose_comm_backend(const std::string& requested, const std::string& device, bool nccl_usable,
                                      const std::string& nccl_why, bool gpu_shared) {
  const std::string shared = "several ranks share a GPU, which NCCL refuses";
  // The config refuses parallel.backend = "nccl" on the CPU (config/validate.h).
  FEAST_CHECK(device != "cpu" || requested != "nccl", "NCCL asked for a CPU run");
  if (device == "cpu") return {false, "MPI (a CPU run)"};
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
