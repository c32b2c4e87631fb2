// The threads-per-rank policy: OMP_NUM_THREADS wins; otherwise the CPUs a rank may use, shared
// with the ranks on its host whose CPU masks overlap its own.
#include "comm/topology/cpu_threads.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"

namespace feast {
namespace {

CpuSet cpus(std::initializer_list<int> ids) {
  CpuSet s;
  s.words.assign(16, 0);
  for (int id : ids) s.words[size_t(id / 64)] |= uint64_t{1} << (id % 64);
  return s;
}

TEST(Threads, TheUsersOmpNumThreadsWins) {
  EXPECT_EQ(choose_threads(3, 16, 4), 3);
  EXPECT_EQ(choose_threads(std::nullopt, 16, 4), 4);
  EXPECT_EQ(choose_threads(std::nullopt, 2, 8), 1);  // at least one
}

TEST(Threads, UnboundRanksShareTheirHost) {
  // Four ranks on host a, all free to run anywhere on its 8 CPUs; one rank on host b.
  const CpuSet all = cpus({0, 1, 2, 3, 4, 5, 6, 7});
  const std::vector<std::string> hosts = {"a", "a", "a", "a", "b"};
  const std::vector<CpuSet> masks = {all, all, all, all, all};
  EXPECT_EQ(ranks_sharing_cpus(hosts, masks, 0), 4);
  EXPECT_EQ(ranks_sharing_cpus(hosts, masks, 4), 1);
  EXPECT_EQ(choose_threads(std::nullopt, all.count(), ranks_sharing_cpus(hosts, masks, 2)), 2);
}

TEST(Threads, BoundRanksUseTheirOwnCores) {
  // mpirun --bind-to core or Slurm binding: disjoint masks, each rank keeps its own CPUs.
  const std::vector<std::string> hosts = {"a", "a", "a"};
  const std::vector<CpuSet> masks = {cpus({0, 1}), cpus({2, 3}), cpus({4, 5, 6, 7})};
  EXPECT_EQ(ranks_sharing_cpus(hosts, masks, 0), 1);
  EXPECT_EQ(choose_threads(std::nullopt, masks[2].count(), ranks_sharing_cpus(hosts, masks, 2)), 4);
  // Partly overlapping masks count as sharing.
  const std::vector<CpuSet> overlap = {cpus({0, 1, 2}), cpus({2, 3}), cpus({5})};
  EXPECT_EQ(ranks_sharing_cpus(hosts, overlap, 0), 2);
  EXPECT_EQ(ranks_sharing_cpus(hosts, overlap, 2), 1);
}

TEST(Threads, ReadsThisProcessAndItsEnvironment) {
  EXPECT_GE(process_cpus().count(), 1);
  setenv("OMP_NUM_THREADS", "3,2", 1);  // a nested list: the outer level counts
  EXPECT_EQ(omp_num_threads_from_env(), 3);
  setenv("OMP_NUM_THREADS", "zero", 1);
  EXPECT_EQ(omp_num_threads_from_env(), std::nullopt);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(omp_num_threads_from_env(), std::nullopt);
}

// Communication waits spin only when every thread of the ranks sharing these CPUs has a core;
// FEAST_COMM_WAIT overrides, and a value it does not know is an error naming it.
TEST(Threads, WaitsSpinOnlyWhenEveryThreadHasACore) {
  EXPECT_TRUE(threads_have_own_cores(2, 1, 2));
  EXPECT_TRUE(threads_have_own_cores(1, 4, 4));
  EXPECT_FALSE(threads_have_own_cores(8, 1, 2));
  EXPECT_FALSE(threads_have_own_cores(2, 2, 2));
  setenv("FEAST_COMM_WAIT", "back-off", 1);
  EXPECT_EQ(choose_wait_policy(1, 1), WaitPolicy::kBackOff);
  setenv("FEAST_COMM_WAIT", "spin", 1);
  EXPECT_EQ(choose_wait_policy(1 << 20, 64), WaitPolicy::kSpin);
  setenv("FEAST_COMM_WAIT", "fast", 1);
  try {
    choose_wait_policy(1, 1);
    ADD_FAILURE() << "FEAST_COMM_WAIT=fast was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("FEAST_COMM_WAIT = 'fast'"), std::string::npos) << e.what();
  }
  unsetenv("FEAST_COMM_WAIT");
  EXPECT_EQ(choose_wait_policy(1 << 20, 1), WaitPolicy::kBackOff);  // a million ranks share these CPUs
}

}  // namespace
}  // namespace feast
