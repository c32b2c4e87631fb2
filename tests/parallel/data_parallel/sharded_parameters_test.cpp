// ZeRO 3's parameters (ShardedParameters) over the real MPI world as the data-parallel group, on
// the CPU backend's reserved pages: a gathered block holds every rank's values, a released one
// gives its pages back (they read as zero again), the pages held never exceed the working set
// the planner counts, and after an update the ranges that stay whole carry every owner's values.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "comm/mpi_world.h"
#include "parallel/data_parallel/sharded_parameters.h"

namespace feast {
namespace {

constexpr size_t kPage = 1024;  // floats in a 4 KiB page

TEST(ShardedPages, PinsTheShardAndWhatStaysWholeAndCountsTwoBlocksMore) {
  // 10 pages: whole [0, 1500), units [1500, 4000) [4000, 7000) [7000, 9500), whole [9500, 10240);
  // the shard [5000, 6000).
  const std::vector<FlatRange> units = {{1500, 4000}, {4000, 7000}, {7000, 9500}};
  const ShardedPages p(10 * kPage, 4, 4096, {5000, 6000}, units);
  ASSERT_EQ(p.pages, 10u);
  const std::vector<bool> pinned = {true, true, false, false, true, true, false, false, false, true};
  EXPECT_EQ(p.pinned, pinned);
  EXPECT_EQ(p.unit_pages[0], (std::pair<size_t, size_t>{1, 4}));
  EXPECT_EQ(p.unit_pages[1], (std::pair<size_t, size_t>{3, 7}));
  EXPECT_EQ(p.pinned_bytes(), 5u * 4096);
  // Units 1 and 2 together: pages 3..9 less the pinned 4, 5 and 9: 3, 6, 7, 8.
  EXPECT_EQ(p.working_set_bytes(), (5u + 4u) * 4096);
  EXPECT_EQ(whole_ranges(10 * kPage, units).size(), 2u);
  // A backend that cannot give pages back holds everything.
  const ShardedPages none(10 * kPage, 4, 0, {5000, 6000}, units);
  EXPECT_EQ(none.working_set_bytes(), 10u * kPage * 4);
}

float value_of(size_t i, int version) { return float(i % 977) * 0.5f + float(version); }

TEST(ShardedParameters, GathersBlocksWholeAndGivesTheirPagesBack) {
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  CpuBackend backend;
  const size_t n = 40 * kPage + 123;
  // A small embedding, six blocks of unequal sizes not aligned to pages, a final range.
  const std::vector<FlatRange> units = {{3000, 9000},   {9000, 15500},  {15500, 21000},
                                        {21000, 28100}, {28100, 34000}, {34000, 39000}};
  Tensor params = backend.reserve(DType::kFloat32, n);
  float* p = params.as<float>();
  for (size_t i = 0; i < n; ++i) p[i] = value_of(i, 0);
  const ShardRange shard = shard_range(n, world->size(), world->rank());
  ShardedParameters sharded(backend, params.view(), shard, units, *world);
  const ShardedPages layout(n, 4, backend.page_bytes(), shard, units);
  sharded.release_all();
  EXPECT_EQ(sharded.held_bytes(), layout.pinned_bytes());
  // A page inside a released block and outside the shard was given back: it reads zero.
  for (size_t u = 0; u < units.size(); ++u)
    for (size_t page = layout.unit_pages[u].first; page < layout.unit_pages[u].second; ++page)
      if (!layout.pinned[page]) {
        EXPECT_EQ(p[page * kPage], 0.0f) << "unit " << u << " page " << page;
      }

  // A forward's pattern: acquire, prefetch the next, release. Every gathered block is whole.
  for (int u = 0; u < int(units.size()); ++u) {
    sharded.acquire(u);
    if (u + 1 < int(units.size())) sharded.prefetch(u + 1);
    for (size_t i = units[size_t(u)].begin; i < units[size_t(u)].end; ++i)
      ASSERT_EQ(p[i], value_of(i, 0)) << "unit " << u << " element " << i;
    sharded.release(u);
    EXPECT_LE(sharded.held_bytes(), layout.working_set_bytes());
  }
  EXPECT_LE(sharded.peak_bytes(), layout.working_set_bytes());
  EXPECT_GT(sharded.peak_bytes(), layout.pinned_bytes());
  EXPECT_EQ(sharded.held_bytes(), layout.pinned_bytes());

  // An update of this rank's shard reaches the others: the whole ranges at once, blocks when
  // gathered next.
  for (size_t i = shard.begin; i < shard.end; ++i) p[i] = value_of(i, 1);
  sharded.refresh_whole_ranges();
  for (const FlatRange& r : whole_ranges(n, units))
    for (size_t i = r.begin; i < r.end; ++i) ASSERT_EQ(p[i], value_of(i, 1)) << "whole range element " << i;
  for (int u = int(units.size()) - 1; u >= 0; --u) {  // a backward's order
    sharded.acquire(u);
    if (u > 0) sharded.prefetch(u - 1);
    for (size_t i = units[size_t(u)].begin; i < units[size_t(u)].end; ++i)
      ASSERT_EQ(p[i], value_of(i, 1)) << "unit " << u << " element " << i;
    sharded.release(u);
  }
  // gather_all keeps every block whole through acquire and release, until release_all.
  sharded.gather_all();
  sharded.acquire(2);
  sharded.release(2);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], value_of(i, 1)) << "element " << i;
  sharded.release_all();
  EXPECT_EQ(sharded.held_bytes(), layout.pinned_bytes());
  // hold_all makes every page usable without communication (a checkpoint is read into it).
  sharded.hold_all();
  for (size_t i = 0; i < n; ++i) p[i] = value_of(i, 2);
  sharded.release_all();
  sharded.acquire(3);
  for (size_t i = units[3].begin; i < units[3].end; ++i) ASSERT_EQ(p[i], value_of(i, 2)) << "element " << i;
  sharded.release(3);
  const ReductionTimes t = sharded.gather_times();
  EXPECT_GT(t.in_flight, 0.0);
  EXPECT_GE(t.exposed, 0.0);
}

}  // namespace
}  // namespace feast
