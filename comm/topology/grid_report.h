// The start-up report of the rank grid: each rank's coordinates and host, every group's ranks,
// and a warning when a tensor-parallel group spans hosts (its all-reduces would then cross the
// network on every layer). describe_grid is pure, so it is tested without MPI.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/layout.h"

namespace feast {

// Every rank's host name (MPI_Get_processor_name), indexed by world rank. Collective over world.
std::vector<std::string> gather_host_names(Communicator& world);
// Every rank's `mine` (its first 255 bytes), indexed by world rank. Collective over world.
std::vector<std::string> gather_strings(Communicator& world, const std::string& mine);

// Rank `rank`'s place among the ranks on its host (0, 1, ...: which of the host's GPUs it takes),
// from gather_host_names' list (one entry, rank 0, in a job of one).
int local_rank(const std::vector<std::string>& hosts, int rank);

// A multi-line block for rank 0 to print; hosts[r] is world rank r's host. The embedding groups
// are listed only for a model whose head is tied to its embedding (others have none). Up to
// kEveryRankUpTo ranks, or with every_rank, each rank gets a line and every group is listed;
// a larger job gets a block that fits a screen: ranks per host as ranges, each kind of group
// by its count, its first two and its last, and at most three warnings with a count of the rest.
constexpr int kEveryRankUpTo = 16;
std::string describe_grid(const ParallelLayout& layout, const std::vector<std::string>& hosts,
                          bool tied_embedding = true, bool every_rank = false);

}  // namespace feast
