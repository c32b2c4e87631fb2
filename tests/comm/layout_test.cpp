// ParallelLayout against its definition: coordinates are a bijection with ranks, the groups
// along each axis partition the world, and bad degrees or orders fail naming the config key.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "comm/layout.h"

namespace feast {
namespace {

const std::vector<std::string> kOrders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp",
                                          "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};

// Runs f on every layout with degrees 1..4 and each of the six orders (384 layouts).
template <typename F>
void for_each_layout(F f) {
  for (int tp = 1; tp <= 4; ++tp)
    for (int pp = 1; pp <= 4; ++pp)
      for (int dp = 1; dp <= 4; ++dp)
        for (const std::string& order : kOrders) {
          SCOPED_TRACE("tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
                       " dp=" + std::to_string(dp) + " order=" + order);
          f(ParallelLayout(tp, pp, dp, order));
        }
}

TEST(ParallelLayout, CoordinatesRoundTrip) {
  for_each_layout([](const ParallelLayout& l) {
    EXPECT_EQ(l.world_size(), l.tp() * l.pp() * l.dp());
    std::set<std::vector<int>> seen;
    for (int r = 0; r < l.world_size(); ++r) {
      const RankCoord c = l.coord(r);
      EXPECT_GE(c.tp, 0);
      EXPECT_LT(c.tp, l.tp());
      EXPECT_GE(c.pp, 0);
      EXPECT_LT(c.pp, l.pp());
      EXPECT_GE(c.dp, 0);
      EXPECT_LT(c.dp, l.dp());
      EXPECT_EQ(l.rank_of(c), r);
      seen.insert({c.tp, c.pp, c.dp});
    }
    EXPECT_EQ(static_cast<int>(seen.size()), l.world_size());  // no two ranks share coordinates
  });
}

// Checks one axis: every rank's group has the right size, contains it at the position of its
// coordinate, is the same list seen from each member, and the groups cover every rank once.
void check_partition(const ParallelLayout& l, std::vector<int> (ParallelLayout::*group)(int) const,
                     int RankCoord::*field, int size) {
  std::vector<int> times_seen(l.world_size(), 0);
  for (int r = 0; r < l.world_size(); ++r) {
    const std::vector<int> g = (l.*group)(r);
    ASSERT_EQ(static_cast<int>(g.size()), size);
    EXPECT_EQ(g[l.coord(r).*field], r);
    for (int i = 0; i < size; ++i) {
      EXPECT_EQ(l.coord(g[i]).*field, i);
      EXPECT_EQ((l.*group)(g[i]), g);
    }
    // Count each group once, from its first member.
    if (g[0] == r)
      for (int member : g) ++times_seen[member];
  }
  for (int r = 0; r < l.world_size(); ++r) EXPECT_EQ(times_seen[r], 1) << "rank " << r;
}

TEST(ParallelLayout, GroupsPartitionTheWorld) {
  for_each_layout([](const ParallelLayout& l) {
    check_partition(l, &ParallelLayout::tp_group, &RankCoord::tp, l.tp());
    check_partition(l, &ParallelLayout::pp_group, &RankCoord::pp, l.pp());
    check_partition(l, &ParallelLayout::dp_group, &RankCoord::dp, l.dp());
  });
}

TEST(ParallelLayout, GroupsVaryOnlyTheirOwnAxis) {
  for_each_layout([](const ParallelLayout& l) {
    for (int r = 0; r < l.world_size(); ++r) {
      const RankCoord c = l.coord(r);
      for (int m : l.tp_group(r)) EXPECT_TRUE(l.coord(m).pp == c.pp && l.coord(m).dp == c.dp);
      for (int m : l.pp_group(r)) EXPECT_TRUE(l.coord(m).tp == c.tp && l.coord(m).dp == c.dp);
      for (int m : l.dp_group(r)) EXPECT_TRUE(l.coord(m).tp == c.tp && l.coord(m).pp == c.pp);
    }
  });
}

TEST(ParallelLayout, DefaultOrderPutsTpGroupsOnConsecutiveRanks) {
  const ParallelLayout l(4, 2, 3);
  EXPECT_EQ(l.order(), "tp-dp-pp");
  for (int r = 0; r < l.world_size(); ++r) {
    const int base = r / 4 * 4;
    EXPECT_EQ(l.tp_group(r), (std::vector<int>{base, base + 1, base + 2, base + 3}));
  }
  // Then dp (stride tp), then pp outermost (stride tp * dp).
  EXPECT_EQ(l.dp_group(5), (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(l.pp_group(5), (std::vector<int>{5, 17}));
  EXPECT_EQ(l.coord(23), (RankCoord{.tp = 3, .pp = 1, .dp = 2}));
  EXPECT_EQ(l.coord(13), (RankCoord{.tp = 1, .pp = 1, .dp = 0}));
}

TEST(ParallelLayout, OrderNamesAxesFromInnermost) {
  // dp innermost, then pp, then tp: rank = dp + 2 * (pp + 3 * tp).
  const ParallelLayout l(2, 3, 2, "dp-pp-tp");
  EXPECT_EQ(l.order(), "dp-pp-tp");
  EXPECT_EQ(l.rank_of({.tp = 1, .pp = 2, .dp = 1}), 1 + 2 * (2 + 3 * 1));
  EXPECT_EQ(l.dp_group(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(l.pp_group(0), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(l.tp_group(0), (std::vector<int>{0, 6}));
}

TEST(ParallelLayout, StageQueries) {
  const ParallelLayout l(2, 3, 2);
  for (int r = 0; r < l.world_size(); ++r) {
    EXPECT_EQ(l.is_first_stage(r), l.coord(r).pp == 0);
    EXPECT_EQ(l.is_last_stage(r), l.coord(r).pp == 2);
  }
  const ParallelLayout single(2, 1, 2);
  for (int r = 0; r < single.world_size(); ++r)
    EXPECT_TRUE(single.is_first_stage(r) && single.is_last_stage(r));
}

TEST(ParallelLayout, EmbeddingGroupJoinsFirstAndLastStage) {
  for_each_layout([](const ParallelLayout& l) {
    for (int r = 0; r < l.world_size(); ++r) {
      const RankCoord c = l.coord(r);
      const std::vector<int> g = l.embedding_group(r);
      const int first = l.rank_of({.tp = c.tp, .pp = 0, .dp = c.dp});
      const int last = l.rank_of({.tp = c.tp, .pp = l.pp() - 1, .dp = c.dp});
      if (l.pp() == 1) {
        EXPECT_EQ(g, (std::vector<int>{r}));
      } else if (c.pp == 0 || c.pp == l.pp() - 1) {
        EXPECT_EQ(g, (std::vector<int>{first, last}));
      } else {
        EXPECT_TRUE(g.empty()) << "rank " << r << " is on a middle stage";
      }
    }
  });
}

void expect_config_error(int tp, int pp, int dp, const std::string& order, const std::string& key) {
  try {
    ParallelLayout(tp, pp, dp, order);
    ADD_FAILURE() << "no error for tp=" << tp << " pp=" << pp << " dp=" << dp << " order=" << order;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

TEST(ParallelLayout, BadDegreesNameTheKey) {
  expect_config_error(0, 1, 1, "tp-dp-pp", "parallel.tp");
  expect_config_error(1, 0, 1, "tp-dp-pp", "parallel.pp");
  expect_config_error(1, 1, 0, "tp-dp-pp", "parallel.dp");
  expect_config_error(-2, 1, 1, "tp-dp-pp", "parallel.tp = -2");
}

TEST(ParallelLayout, BadOrdersNameTheKeyAndValue) {
  for (const std::string order : {"tp-pp", "tp-dp-dp", "tp-dp-pp-", "TP-dp-pp", "tp_dp_pp", "", "tp-dp-xx",
                                  "tp-dp-pp-tp", "tpdppp", "tp--dp-pp", "tp-cp-dp", "tp-cp-dp-pp-cp", "tp-cp-dp-pp-"}) {
    SCOPED_TRACE(order);
    expect_config_error(1, 1, 1, order, "parallel.order = \"" + order + "\"");
  }
}

TEST(ParallelLayout, BadOrderMessageSaysWhatIsExpected) {
  try {
    ParallelLayout(1, 1, 1, "tp-pp");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "parallel.order = \"tp-pp\" is not a permutation of tp, dp, pp written like "
                 "\"tp-dp-pp\" (or of tp, cp, dp, pp like \"tp-cp-dp-pp\")");
  }
}

// The context-parallel axis: every order of four axes, and orders of three with cp placed just
// outside tp; cp groups partition the world along cp, and the data-parallel group holds the
// ranks of every dp and cp coordinate with this rank's tp and pp (the ranks with its parameters),
// at position dp * cp_degree + cp.
TEST(ParallelLayout, ContextParallelAxis) {
  std::vector<std::string> orders = kOrders;
  std::vector<std::string> axes = {"cp", "dp", "pp", "tp"};
  do orders.push_back(axes[0] + "-" + axes[1] + "-" + axes[2] + "-" + axes[3]);
  while (std::next_permutation(axes.begin(), axes.end()));
  for (int tp : {1, 2})
    for (int pp : {1, 2})
      for (int dp : {1, 3})
        for (int cp : {2, 3})
          for (const std::string& order : orders) {
            SCOPED_TRACE("tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) +
                         " cp=" + std::to_string(cp) + " order=" + order);
            const ParallelLayout l(tp, pp, dp, order, cp);
            ASSERT_EQ(l.world_size(), tp * pp * dp * cp);
            EXPECT_EQ(l.replicas(), dp * cp);
            std::set<std::vector<int>> seen;
            for (int r = 0; r < l.world_size(); ++r) {
              const RankCoord c = l.coord(r);
              EXPECT_EQ(l.rank_of(c), r);
              seen.insert({c.tp, c.pp, c.dp, c.cp});
            }
            EXPECT_EQ(int(seen.size()), l.world_size());
            check_partition(l, &ParallelLayout::cp_group, &RankCoord::cp, cp);
            std::vector<int> times_seen(size_t(l.world_size()), 0);
            for (int r = 0; r < l.world_size(); ++r) {
              const RankCoord c = l.coord(r);
              const std::vector<int> g = l.dp_group(r);
              ASSERT_EQ(int(g.size()), dp * cp);
              EXPECT_EQ(g[size_t(l.replica_index(c))], r);
              for (size_t i = 0; i < g.size(); ++i) {
                const RankCoord m = l.coord(g[i]);
                EXPECT_TRUE(m.tp == c.tp && m.pp == c.pp);
                EXPECT_EQ(l.replica_index(m), int(i));
              }
              for (int m : l.cp_group(r)) EXPECT_TRUE(l.coord(m).tp == c.tp && l.coord(m).pp == c.pp && l.coord(m).dp == c.dp);
              if (g[0] == r)
                for (int m : g) ++times_seen[size_t(m)];
            }
            for (int seen_times : times_seen) EXPECT_EQ(seen_times, 1);
          }
  // A three-axis order puts cp just outside tp, and says so.
  const ParallelLayout l(2, 2, 2, "tp-dp-pp", 2);
  EXPECT_EQ(l.order(), "tp-cp-dp-pp");
  EXPECT_EQ(l.cp_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(l.dp_group(0), (std::vector<int>{0, 2, 4, 6}));  // (dp 0, cp 0), (0, 1), (1, 0), (1, 1)
  EXPECT_EQ(ParallelLayout(2, 2, 2, "tp-dp-pp").order(), "tp-dp-pp");
}

TEST(ParallelLayout, BadContextParallelDegreeNamesTheKey) {
  try {
    ParallelLayout(1, 1, 1, "tp-dp-pp", 0);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.cp = 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace feast
