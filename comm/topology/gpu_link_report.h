// The start-up report of how each host's GPUs are connected (comm/topology/gpu_links.h), printed by
// rank 0 next to the rank grid, and a warning for every tensor-parallel group whose GPUs share a
// slow link (PCIe, or across CPU sockets): its all-reduces run on every layer. Groups that span
// hosts are the grid report's warning. describe_gpu_links is pure, so it is tested without GPUs.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/topology/gpu_links.h"
#include "comm/layout.h"

namespace feast {

// links[r]: world rank r's GPU to the GPU of each rank on its host, those ranks in world-rank
// order (links[r][i] is to the host's i-th rank; kSame to itself).
using HostGpuLinks = std::vector<std::vector<GpuLink>>;

// Collective over world: each rank asks NVML about its GPU's links to the other GPUs on its host
// (hosts[r] and uuids[r]: rank r's host, from gather_host_names, and GPU, from gather_gpu_uuids).
// *why (rank 0's) says why links are unknown, if they are.
HostGpuLinks gather_gpu_links(Communicator& world, const std::vector<std::string>& hosts,
                              const std::vector<GpuUuid>& uuids, std::string* why);

// A block for rank 0: one link matrix per distinct host layout (hosts with the same matrix are
// listed together), a legend, and at most three warnings about tensor-parallel groups on slow
// links, with a count of the rest. Empty when no host has two ranks.
std::string describe_gpu_links(const ParallelLayout& layout, const std::vector<std::string>& hosts,
                               const HostGpuLinks& links, const std::string& why);

}  // namespace feast
