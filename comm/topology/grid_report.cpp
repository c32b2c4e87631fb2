// Host names gathered through the Communicator (packed into int32 words, the interface has no
// byte type) and the text of the grid report.
#include "comm/topology/grid_report.h"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <sstream>

#include "core/error.h"
#include "comm/mpi_check.h"

namespace feast {
namespace {

// One line listing every distinct group of one kind, in order of its first rank; `brief` lists
// the first two and the last with the count ("32 groups: [0, 1] [2, 3] ... [62, 63]").
template <typename GroupOf>
std::string list_groups(const char* title, int world_size, GroupOf group_of, bool brief) {
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size; ++r) {
    std::vector<int> ranks = group_of(r);
    if (!ranks.empty() && seen.insert(ranks).second) groups.push_back(std::move(ranks));
  }
  std::ostringstream os;
  os << title << ":";
  if (groups.empty()) os << " none";
  if (brief && groups.size() > 3) {
    os << " " << groups.size() << " groups of " << groups[0].size() << ": " << format_list(groups[0]) << " "
       << format_list(groups[1]) << " ... " << format_list(groups.back());
  } else {
    for (const std::vector<int>& g : groups) os << " " << format_list(g);
  }
  os << "\n";
  return os.str();
}

// "a: ranks 0-7; b: ranks 8-15": each host's ranks as ranges, hosts in order of their first rank.
std::string ranks_per_host(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::vector<std::vector<int>> ranks;
  for (int r = 0; r < int(hosts.size()); ++r) {
    const auto it = std::find(order.begin(), order.end(), hosts[size_t(r)]);
    if (it == order.end()) {
      order.push_back(hosts[size_t(r)]);
      ranks.push_back({r});
    } else {
      ranks[size_t(it - order.begin())].push_back(r);
    }
  }
  std::ostringstream os;
  os << order.size() << (order.size() == 1 ? " host" : " hosts") << ":";
  const size_t shown = order.size() > 8 ? 7 : order.size();
  for (size_t h = 0; h < shown; ++h) {
    os << (h ? "; " : " ") << order[h] << " rank" << (ranks[h].size() > 1 ? "s " : " ") << format_ranges(ranks[h]);
  }
  if (shown < order.size()) os << "; ... and " << order.size() - shown << " more";
  os << "\n";
  return os.str();
}

}  // namespace

int local_rank(const std::vector<std::string>& hosts, int rank) {
  int n = 0;
  for (int r = 0; r < rank; ++r) n += hosts[size_t(r)] == hosts[size_t(rank)] ? 1 : 0;
  return n;
}

std::vector<std::string> gather_host_names(Communicator& world) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  FEAST_MPI_CHECK(MPI_Get_processor_name(name, &length));
  return gather_strings(world, std::string(name, std::min<size_t>(static_cast<size_t>(length), MPI_MAX_PROCESSOR_NAME - 1)));
}

std::vector<std::string> gather_strings(Communicator& world, const std::string& text) {
  constexpr size_t kWords = 64;  // fixed size, NUL padded: 255 bytes and the NUL
  std::vector<int32_t> mine(kWords, 0);
  std::memcpy(mine.data(), text.data(), std::min<size_t>(text.size(), kWords * 4 - 1));
  const auto n = static_cast<size_t>(world.size());
  std::vector<int32_t> all(n * kWords);
  const std::vector<size_t> counts(n, kWords);
  world.allgather(mine.data(), all.data(), counts, DType::kInt32)->wait();
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data() + r * kWords);
    out[r] = std::string(bytes, strnlen(bytes, kWords * 4));
  }
  return out;
}

std::string describe_grid(const ParallelLayout& layout, const std::vector<std::string>& hosts, bool tied_embedding,
                          bool every_rank) {
  const int n = layout.world_size();
  FEAST_CHECK(hosts.size() == static_cast<size_t>(n),
              "describe_grid: " << hosts.size() << " host names for " << n << " ranks");
  const bool brief = !every_rank && n > kEveryRankUpTo;
  std::ostringstream os;
  const bool cp = layout.cp() > 1;
  os << "parallel grid: " << n << " ranks = tp " << layout.tp() << " x pp " << layout.pp() << " x dp "
     << layout.dp();
  if (cp) os << " x cp " << layout.cp();
  os << " (order " << layout.order() << ", innermost first)\n";
  if (brief) {
    os << "  " << ranks_per_host(hosts);
  } else {
    const int width = static_cast<int>(std::to_string(n - 1).size());
    for (int r = 0; r < n; ++r) {
      const RankCoord c = layout.coord(r);
      os << "  rank ";
      os.width(width);
      os << r << ": tp " << c.tp << " pp " << c.pp << " dp " << c.dp;
      if (cp) os << " cp " << c.cp;
      os << "  host " << hosts[size_t(r)] << "\n";
    }
  }
  os << list_groups("tensor-parallel groups", n, [&](int r) { return layout.tp_group(r); }, brief);
  os << list_groups("pipeline groups", n, [&](int r) { return layout.pp_group(r); }, brief);
  if (cp) os << list_groups("context-parallel groups", n, [&](int r) { return layout.cp_group(r); }, brief);
  os << list_groups(cp ? "data-parallel groups (dp x cp: the ranks holding the same parameters)" : "data-parallel groups",
                    n, [&](int r) { return layout.dp_group(r); }, brief);
  if (tied_embedding)
    os << list_groups("embedding groups", n, [&](int r) { return layout.embedding_group(r); }, brief);

  std::set<std::vector<int>> warned;
  int unprinted = 0;
  for (int r = 0; r < n; ++r) {
    const std::vector<int> group = layout.tp_group(r);
    std::vector<std::string> group_hosts;
    for (int member : group)
      if (std::find(group_hosts.begin(), group_hosts.end(), hosts[size_t(member)]) == group_hosts.end())
        group_hosts.push_back(hosts[size_t(member)]);
    if (group_hosts.size() < 2 || !warned.insert(group).second) continue;
    if (brief && warned.size() > 3) {
      ++unprinted;
      continue;
    }
    os << "warning: tensor-parallel group " << format_list(group) << " spans hosts ";
    for (size_t i = 0; i < group_hosts.size(); ++i) os << (i ? ", " : "") << group_hosts[i];
    os << ": its all-reduces will cross the network\n";
  }
  if (unprinted > 0)
    os << "warning: " << unprinted << " more tensor-parallel group" << (unprinted > 1 ? "s span" : " spans")
       << " hosts (logging.verbose lists every rank)\n";
  return os.str();
}

}  // namespace feast
