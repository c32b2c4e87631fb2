// How many OpenMP threads a rank runs when training.threads = 0: OMP_NUM_THREADS when the user
// set it; otherwise the CPUs this process may run on (its affinity mask, which mpirun or Slurm
// binding and cgroup cpusets set, capped by a cgroup CPU quota) divided among the ranks on the
// same host that may run on the same CPUs. Ranks bound to disjoint cores each use all of their
// own; unbound ranks share the host. Spinning OpenMP barriers collapse when threads outnumber
// cores, so guessing high is the costly mistake.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_world.h"

namespace feast {

// A set of CPU numbers (as in sched_getaffinity), as 64-bit words.
struct CpuSet {
  std::vector<uint64_t> words;
  int count() const;
  bool overlaps(const CpuSet& other) const;
};

// The CPUs this process may run on.
CpuSet process_cpus();
// The CPU quota of this process's cgroup, rounded up (cgroup v2 cpu.max or v1 cfs quota);
// nothing when there is no limit or it cannot be read.
std::optional<int> cgroup_cpu_limit();
// OMP_NUM_THREADS when it is set to a positive integer (its first entry, for a nested list).
std::optional<int> omp_num_threads_from_env();

// How many ranks, this one included, share CPUs with rank `me`: those on the same host whose
// masks overlap its own. hosts and masks are indexed by world rank.
int ranks_sharing_cpus(const std::vector<std::string>& hosts, const std::vector<CpuSet>& masks, int me);

// The policy: the user's OMP_NUM_THREADS if set, else available / sharing, at least 1.
int choose_threads(std::optional<int> omp_num_threads, int available_cpus, int sharing_ranks);

// The policy applied to this process: its CPUs (affinity, capped by a cgroup quota) shared by
// `sharing_ranks` ranks, unless OMP_NUM_THREADS says otherwise; with how it was chosen, in words.
struct ThreadChoice {
  int threads = 1;
  std::string from;
};
ThreadChoice thread_policy(int sharing_ranks);

// The CPUs this process may use: its affinity, capped by a cgroup CPU quota.
int available_cpus();

// The physical cores among the CPUs this process may use (hyperthreads of one core share its
// vector units): distinct (package, core) pairs of its affinity mask from sysfs topology, the
// CPU count where that cannot be read; capped by a cgroup CPU quota.
int available_cores();

// Whether `sharing_ranks` ranks of `threads` threads each fit in `available_cpus`: then each
// thread has a core of its own, and a rank waiting for communication may spin (WaitPolicy in
// comm/mpi_world.h) instead of sleeping between tests.
bool threads_have_own_cores(int sharing_ranks, int threads, int available_cpus);

// Collective over world: how many ranks on this rank's host may run on its CPUs (itself
// included); hosts[r] is world rank r's host name.
int ranks_sharing_my_cpus(Communicator& world, const std::vector<std::string>& hosts);

// kSpin when this rank's threads each have a core (threads_have_own_cores), else kBackOff;
// FEAST_COMM_WAIT=spin|back-off overrides it (a container whose CPU count misleads).
WaitPolicy choose_wait_policy(int sharing_ranks, int threads);

// How choose_threads chose, in words: "OMP_NUM_THREADS = 4", or "2 CPUs available / 1 rank(s)
// sharing them".
std::string describe_thread_choice(std::optional<int> omp_num_threads, int available_cpus, int sharing_ranks);

}  // namespace feast
