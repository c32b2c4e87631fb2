// make_process_groups: one split per kind of group, then a check that every group holds the
// world ranks the layout says, in its order (cheap at start-up, and a wrong group would
// otherwise show up only as wrong numbers much later).
#include "comm/process_groups.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace feast {
namespace {

// The color names the group by its smallest world rank (unique because groups of one kind
// partition the world); the key is the position in the layout's list, which fixes rank order.
std::unique_ptr<Communicator> split_as(Communicator& world, const std::vector<int>& ranks, const std::string& name) {
  if (ranks.empty()) return world.split(-1, 0, name);
  const int me = world.rank();
  const auto position = std::find(ranks.begin(), ranks.end(), me);
  FEAST_CHECK(position != ranks.end(), "layout's " << name << " group " << format_list(ranks)
                                                   << " does not contain rank " << me);
  const int color = *std::min_element(ranks.begin(), ranks.end());
  auto group = world.split(color, static_cast<int>(position - ranks.begin()), name);

  FEAST_CHECK(group->size() == static_cast<int>(ranks.size()),
              "the " << name << " group of rank " << me << " has " << group->size() << " ranks but the layout says "
                     << format_list(ranks));
  static_assert(sizeof(int) == 4, "world ranks travel as DType::kInt32");
  std::vector<int> members(ranks.size());
  const std::vector<size_t> ones(ranks.size(), 1);
  group->allgather(&me, members.data(), ones, DType::kInt32)->wait();
  FEAST_CHECK(std::equal(members.begin(), members.end(), ranks.begin()),
              "the " << name << " group of rank " << me << " holds world ranks " << format_list(members)
                     << " but the layout says " << format_list(ranks));
  return group;
}

}  // namespace

ProcessGroups make_process_groups(std::unique_ptr<Communicator> world, const ParallelLayout& layout,
                                  bool tied_embedding) {
  if (world->size() != layout.world_size())
    throw ConfigError("parallel layout tp " + std::to_string(layout.tp()) + " x pp " + std::to_string(layout.pp()) +
                      " x dp " + std::to_string(layout.dp()) +
                      (layout.cp() > 1 ? " x cp " + std::to_string(layout.cp()) : std::string()) + " needs " + std::to_string(layout.world_size()) +
                      " ranks, but the job has " + std::to_string(world->size()));
  const int me = world->rank();
  ProcessGroups groups;
  groups.tp = split_as(*world, layout.tp_group(me), "tp");
  groups.pp = split_as(*world, layout.pp_group(me), "pp");
  groups.dp = split_as(*world, layout.dp_group(me), "dp");
  groups.cp = split_as(*world, layout.cp_group(me), "cp");
  if (tied_embedding) groups.embedding = split_as(*world, layout.embedding_group(me), "embedding");
  groups.world = std::move(world);
  return groups;
}

}  // namespace feast
