// The rank grid dp x pp x tp as a pure object: which coordinates a rank has and which ranks form
// each group. No MPI here, so it is unit-tested on its own and every rank computes the same
// answer. `order` names the axes from innermost (consecutive ranks) to outermost; the default
// "tp-dp-pp" keeps a tensor-parallel group on consecutive ranks, i.e. inside one node.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace feast {

enum class Axis { kTp, kPp, kDp };

struct RankCoord {
  int tp = 0, pp = 0, dp = 0;
  bool operator==(const RankCoord&) const = default;
};

class ParallelLayout {
 public:
  // Throws ConfigError when a degree is < 1 or order is not a permutation of tp, dp, pp
  // written "a-b-c".
  ParallelLayout(int tp, int pp, int dp, const std::string& order = "tp-dp-pp");

  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int dp() const { return dp_; }
  int world_size() const { return tp_ * pp_ * dp_; }
  const std::string& order() const { return order_name_; }

  RankCoord coord(int rank) const;
  int rank_of(const RankCoord& c) const;

  // Ranks of `rank`'s groups, in group-rank order (the position in the list is the rank within
  // the group): tp ranks ordered by tp coordinate, pp by stage, dp by dp coordinate.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  // First and last pipeline stage with this rank's tp and dp coordinates (one rank when pp = 1);
  // empty for ranks on middle stages. Tied embedding gradients are summed over it.
  std::vector<int> embedding_group(int rank) const;

  bool is_first_stage(int rank) const { return coord(rank).pp == 0; }
  bool is_last_stage(int rank) const { return coord(rank).pp == pp_ - 1; }

 private:
  std::vector<int> group_along(int rank, Axis axis) const;
  int size_of(Axis a) const;

  int tp_, pp_, dp_;
  std::string order_name_;
  std::array<Axis, 3> order_;  // innermost first
};

// "[0, 2, 4]": a rank list (or layer counts) for messages and the grid report.
std::string format_list(const std::vector<int>& values);
// "0-3,8-11": ascending ranks with runs of consecutive ones as ranges (large jobs' reports).
std::string format_ranges(const std::vector<int>& ascending);

}  // namespace feast
