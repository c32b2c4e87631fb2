// describe_grid without MPI: every rank appears with its coordinates and host, every group is
// listed once, and the cross-host warning appears exactly for tensor-parallel groups that span
// hosts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "comm/topology/grid_report.h"
#include "comm/layout.h"

namespace feast {
namespace {

size_t occurrences(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

TEST(DescribeGrid, ListsEveryRankWithCoordinatesAndHost) {
  const ParallelLayout layout(2, 2, 2);  // tp-dp-pp: rank = tp + 2 dp + 4 pp
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "c", "c", "d", "d"};
  const std::string text = describe_grid(layout, hosts);
  for (int r = 0; r < 8; ++r) {
    const RankCoord c = layout.coord(r);
    const std::string line = "rank " + std::to_string(r) + ": tp " + std::to_string(c.tp) + " pp " +
                             std::to_string(c.pp) + " dp " + std::to_string(c.dp) + "  host " + hosts[r] + "\n";
    EXPECT_NE(text.find(line), std::string::npos) << "missing `" << line << "` in\n" << text;
  }
  EXPECT_NE(text.find("tensor-parallel groups: [0, 1] [2, 3] [4, 5] [6, 7]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline groups: [0, 4] [1, 5] [2, 6] [3, 7]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("data-parallel groups: [0, 2] [1, 3] [4, 6] [5, 7]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("embedding groups: [0, 4] [1, 5] [2, 6] [3, 7]\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("warning"), std::string::npos) << text;
}

TEST(DescribeGrid, WarnsOncePerTensorParallelGroupSpanningHosts) {
  const ParallelLayout layout(2, 1, 3);  // tp groups [0, 1] [2, 3] [4, 5]
  const std::string text = describe_grid(layout, {"a", "a", "a", "b", "b", "b"});
  EXPECT_EQ(occurrences(text, "warning"), 1u) << text;
  EXPECT_NE(text.find("warning: tensor-parallel group [2, 3] spans hosts a, b: its all-reduces will cross the "
                      "network\n"),
            std::string::npos)
      << text;
}

TEST(DescribeGrid, DataParallelAcrossHostsIsNotWarned) {
  const ParallelLayout layout(2, 1, 2);
  EXPECT_EQ(describe_grid(layout, {"a", "a", "b", "b"}).find("warning"), std::string::npos);
}

TEST(DescribeGrid, MiddleStagesHaveNoEmbeddingGroup) {
  const ParallelLayout layout(1, 3, 1);
  const std::string text = describe_grid(layout, {"h", "h", "h"});
  EXPECT_NE(text.find("embedding groups: [0, 2]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline groups: [0, 1, 2]\n"), std::string::npos) << text;
}

TEST(DescribeGrid, AnUntiedModelHasNoEmbeddingGroups) {
  const ParallelLayout layout(1, 3, 1);
  const std::string text = describe_grid(layout, {"h", "h", "h"}, /*tied_embedding=*/false);
  EXPECT_EQ(text.find("embedding groups"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline groups: [0, 1, 2]\n"), std::string::npos) << text;
}

TEST(DescribeGrid, ContextParallelRanksAndGroupsAreNamed) {
  const ParallelLayout layout(2, 1, 1, "tp-dp-pp", 2);  // tp-cp-dp-pp: rank = tp + 2 cp
  const std::string text = describe_grid(layout, {"h", "h", "h", "h"});
  EXPECT_NE(text.find("4 ranks = tp 2 x pp 1 x dp 1 x cp 2 (order tp-cp-dp-pp"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3: tp 1 pp 0 dp 0 cp 1"), std::string::npos) << text;
  EXPECT_NE(text.find("context-parallel groups: [0, 2] [1, 3]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("data-parallel groups (dp x cp: the ranks holding the same parameters): [0, 2] [1, 3]\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(describe_grid(ParallelLayout(2, 1, 2), {"h", "h", "h", "h"}).find("cp"), std::string::npos);
}

TEST(DescribeGrid, RejectsWrongNumberOfHosts) {
  EXPECT_THROW(describe_grid(ParallelLayout(2, 1, 1), {"a"}), Error);
}

// 64 ranks on 8 hosts: the block fits a screen (no line per rank), still names every host's
// ranks, counts the groups, and caps the cross-host warnings.
TEST(DescribeGrid, SixtyFourRanksFitAScreen) {
  const ParallelLayout layout(4, 4, 4);
  std::vector<std::string> hosts;
  for (int r = 0; r < 64; ++r) hosts.push_back(std::string("node").append(std::to_string(r / 8)));
  const std::string text = describe_grid(layout, hosts);
  EXPECT_LE(occurrences(text, "\n"), 12u) << text;
  EXPECT_EQ(text.find("rank 63:"), std::string::npos) << text;
  EXPECT_NE(text.find("8 hosts: node0 ranks 0-7; node1 ranks 8-15;"), std::string::npos) << text;
  EXPECT_NE(text.find("tensor-parallel groups: 16 groups of 4: [0, 1, 2, 3] [4, 5, 6, 7] ... [60, 61, 62, 63]\n"),
            std::string::npos)
      << text;
  for (const char* line : {"pipeline groups: 16 groups of 4", "data-parallel groups: 16 groups of 4"})
    EXPECT_NE(text.find(line), std::string::npos) << text;

  // A tensor-parallel group of 8 on 4-rank hosts: every group spans two hosts; three are named.
  std::vector<std::string> small_hosts;
  for (int r = 0; r < 64; ++r) small_hosts.push_back(std::string("h").append(std::to_string(r / 4)));
  const std::string spanning = describe_grid(ParallelLayout(8, 1, 8), small_hosts);
  EXPECT_EQ(occurrences(spanning, "warning: tensor-parallel group ["), 3u) << spanning;
  EXPECT_NE(spanning.find("warning: 5 more tensor-parallel groups span hosts"), std::string::npos) << spanning;
  // logging.verbose: every rank again.
  EXPECT_NE(describe_grid(layout, hosts, true, true).find("rank 63: "), std::string::npos);
}

}  // namespace
}  // namespace feast
