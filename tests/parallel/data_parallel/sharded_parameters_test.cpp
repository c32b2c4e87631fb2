// ZeRO 3's parameters (ShardedParameters) over the real MPI world as the data-parallel group, on
// the CPU backend's reserved pages: a gathered block holds every rank's values, a released one
// gives its pages back (they read as zero again), the pages held never exceed the working set
// the planner counts, and after an update a unit gathered again carries every owner's values.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "comm/mpi_world.h"
#include "parallel/data_parallel/sharded_parameters.h"

namespace feast {
namespace {

constexpr size_t kPage = 1024;  // floats in a 4 KiB page

// Units tiling [0, n) with the walk a one-stage model would give them: one step per unit, the
// last (the head's) also holding the first (the front, where the head's matrix is) when
// `head_reads_front`.
ParameterUnits units_of(std::vector<FlatRange> ranges, bool head_reads_front) {
  ParameterUnits u;
  u.ranges = std::move(ranges);
  for (int i = 0; i < int(u.ranges.size()); ++i) u.walk.push_back({i});
  u.has_embedding_step = u.has_head_step = true;
  if (head_reads_front) u.walk.back().push_back(0);
  return u;
}

TEST(ShardedPages, PinsTheShardAndCountsTwoNeighbouringStepsMore) {
  // 10 pages: units [0, 1500) [1500, 4000) [4000, 7000) [7000, 9500) [9500, 10240); the shard
  // [5000, 6000): page 4 and 5.
  const std::vector<FlatRange> ranges = {{0, 1500}, {1500, 4000}, {4000, 7000}, {7000, 9500}, {9500, 10 * kPage}};
  const ShardedPages p(10 * kPage, 4, 4096, {5000, 6000}, units_of(ranges, false));
  ASSERT_EQ(p.pages, 10u);
  const std::vector<bool> pinned = {false, false, false, false, true, true, false, false, false, false};
  EXPECT_EQ(p.pinned, pinned);
  EXPECT_EQ(p.unit_pages[1], (std::pair<size_t, size_t>{1, 4}));
  EXPECT_EQ(p.unit_pages[2], (std::pair<size_t, size_t>{3, 7}));
  EXPECT_EQ(p.pinned_bytes(), 2u * 4096);
  // Units 2 and 3 together: pages 3..9 less the pinned 4 and 5: 3, 6, 7, 8, 9 (units 1 and 2:
  // 1, 2, 3, 6; units 3 and 4: 6, 7, 8, 9).
  EXPECT_EQ(p.working_set_bytes(), (2u + 5u) * 4096);
  // A head's step that holds the front too: units 3, 4 and 0 make pages 0, 1, 6, 7, 8, 9.
  const ShardedPages tied(10 * kPage, 4, 4096, {5000, 6000}, units_of(ranges, true));
  EXPECT_EQ(tied.working_set_bytes(), (2u + 6u) * 4096);
  // A backend that cannot give pages back holds everything.
  const ShardedPages none(10 * kPage, 4, 0, {5000, 6000}, units_of(ranges, false));
  EXPECT_EQ(none.working_set_bytes(), 10u * kPage * 4);
}

float value_of(size_t i, int version) { return float(i % 977) * 0.5f + float(version); }

TEST(ShardedParameters, GathersUnitsWholeAndGivesTheirPagesBack) {
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  CpuBackend backend;
  const size_t n = 40 * kPage + 123;
  // A small front, six blocks of unequal sizes not aligned to pages, a tail read with the front.
  const ParameterUnits units = units_of({{0, 3000}, {3000, 9000}, {9000, 15500}, {15500, 21000}, {21000, 28100},
                                         {28100, 34000}, {34000, 39000}, {39000, n}},
                                        true);
  const std::vector<FlatRange>& ranges = units.ranges;
  Tensor params = backend.reserve(DType::kFloat32, n);
  float* p = params.as<float>();
  for (size_t i = 0; i < n; ++i) p[i] = value_of(i, 0);
  const ShardRange shard = shard_range(n, world->size(), world->rank());
  ShardedParameters sharded(backend, params.view(), shard, units, *world);
  const ShardedPages layout(n, 4, backend.page_bytes(), shard, units);
  sharded.release_all();
  EXPECT_EQ(sharded.held_bytes(), layout.pinned_bytes());
  // A page outside the shard was given back: it reads zero.
  for (size_t page = 0; page < layout.pages; ++page)
    if (!layout.pinned[page]) {
      EXPECT_EQ(p[page * kPage], 0.0f) << "page " << page;
    }
  auto expect_whole = [&](int step, int version) {
    for (const int u : units.walk[size_t(step)])
      for (size_t i = ranges[size_t(u)].begin; i < ranges[size_t(u)].end; ++i)
        ASSERT_EQ(p[i], value_of(i, version)) << "unit " << u << " element " << i;
  };
  auto hold = [&](int step, int next) {
    for (const int u : units.walk[size_t(step)]) sharded.acquire(u);
    if (next >= 0)
      for (const int u : units.walk[size_t(next)]) sharded.prefetch(u);
  };
  auto let_go = [&](int step) {
    for (const int u : units.walk[size_t(step)]) sharded.release(u);
    EXPECT_LE(sharded.held_bytes(), layout.working_set_bytes());
  };
  const int steps = int(units.walk.size());

  // A forward's pattern: hold a step, prefetch the next, let go. Every gathered unit is whole.
  for (int s = 0; s < steps; ++s) {
    hold(s, s + 1 < steps ? s + 1 : -1);
    expect_whole(s, 0);
    let_go(s);
  }
  EXPECT_LE(sharded.peak_bytes(), layout.working_set_bytes());
  EXPECT_GT(sharded.peak_bytes(), layout.pinned_bytes());
  EXPECT_EQ(sharded.held_bytes(), layout.pinned_bytes());

  // An update of this rank's shard reaches the others when a unit is gathered next.
  for (size_t i = shard.begin; i < shard.end; ++i) p[i] = value_of(i, 1);
  for (int s = steps - 1; s >= 1; --s) {  // a backward's order (the embedding's step needs no weights)
    hold(s, s > 1 ? s - 1 : -1);
    expect_whole(s, 1);
    let_go(s);
  }
  // gather_all keeps every unit whole through acquire and release, until release_all.
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
  for (size_t i = ranges[3].begin; i < ranges[3].end; ++i) ASSERT_EQ(p[i], value_of(i, 2)) << "element " << i;
  sharded.release(3);
  const ReductionTimes t = sharded.gather_times();
  EXPECT_GT(t.in_flight, 0.0);
  EXPECT_GE(t.exposed, 0.0);
}

}  // namespace
}  // namespace feast
