// The threads-per-rank policy: OMP_NUM_THREADS wins; otherwise the CPUs a rank may use, shared
// with the ranks on its host whose CPU masks overlap its own.
#include "trainer/threads.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace feast
