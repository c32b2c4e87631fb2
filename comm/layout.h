// The rank grid dp x pp x tp x cp as a pure object: which coordinates a rank has and which ranks
// form each group. No MPI here, so it is unit-tested on its own and every rank computes the same
// answer. `order` names the axes from innermost (consecutive ranks) to outermost; the default
// "tp-dp-pp" keeps a tensor-parallel group on consecutive ranks, i.e. inside one node. The
// context-parallel axis (cp ranks sharing each sequence, model/context_parallel.h) may be named
// in the order ("tp-cp-dp-pp"); an order of the other three places it just outside tp, as
// Megatron-LM's "tp-cp-ep-dp-pp" does, since its ring exchanges key/value blocks at every layer.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace feast {

enum class Axis { kTp, kPp, kDp, kCp };

struct RankCoord {
  int tp = 0, pp = 0, dp = 0, cp = 0;
  bool operator==(const RankCoord&) const = default;
};

class ParallelLayout {
 public:
  // Throws ConfigError when a degree is < 1 or order is not a permutation of tp, dp, pp (and
  // cp) written "a-b-c" ("a-b-c-d").
  ParallelLayout(int tp, int pp, int dp, const std::string& order = "tp-dp-pp", int cp = 1);

  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int dp() const { return dp_; }
  int cp() const { return cp_; }
  // Ranks holding the same parameters (the same tp slice of the same stage): dp * cp. Their
  // gradients are summed and ZeRO shards over them.
  int replicas() const { return dp_ * cp_; }
  int world_size() const { return tp_ * pp_ * dp_ * cp_; }
  // The order as given; with cp > 1 and a three-axis order, with cp placed just outside tp.
  const std::string& order() const { return order_name_; }

  RankCoord coord(int rank) const;
  int rank_of(const RankCoord& c) const;

  // Ranks of `rank`'s groups, in group-rank order (the position in the list is the rank within
  // the group): tp ranks ordered by tp coordinate, pp by stage, cp by cp coordinate. The
  // data-parallel group holds the context-parallel ranks too (Megatron-LM's "dp-cp" group):
  // every rank with this rank's parameters, ordered by replica_index.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  // A rank's position in its data-parallel group: dp * cp_degree + cp.
  int replica_index(const RankCoord& c) const { return c.dp * cp_ + c.cp; }
  // First and last pipeline stage with this rank's tp, dp and cp coordinates (one rank when pp = 1);
  // empty for ranks on middle stages. Tied embedding gradients are summed over it.
  std::vector<int> embedding_group(int rank) const;

  bool is_first_stage(int rank) const { return coord(rank).pp == 0; }
  bool is_last_stage(int rank) const { return coord(rank).pp == pp_ - 1; }

 private:
  std::vector<int> group_along(int rank, Axis axis) const;
  int size_of(Axis a) const;

  int tp_, pp_, dp_, cp_;
  std::string order_name_;
  std::array<Axis, 4> order_;  // innermost first
};

// "[0, 2, 4]": a rank list (or layer counts) for messages and the grid report.
std::string format_list(const std::vector<int>& values);
// "0-3,8-11": ascending ranks with runs of consecutive ones as ranges (large jobs' reports).
std::string format_ranges(const std::vector<int>& ascending);

}  // namespace feast
