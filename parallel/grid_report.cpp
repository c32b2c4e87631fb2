// Host names gathered through the Communicator (packed into int32 words, the interface has no
// byte type) and the text of the grid report.
#include "parallel/grid_report.h"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <sstream>

#include "core/error.h"
#include "parallel/mpi_check.h"

namespace feast {
namespace {

constexpr size_t kNameWords = (MPI_MAX_PROCESSOR_NAME + 3) / 4;  // fixed size, NUL padded

// One line listing every distinct group of one kind, in order of its first rank.
template <typename GroupOf>
std::string list_groups(const char* title, int world_size, GroupOf group_of) {
  std::set<std::vector<int>> seen;
  std::ostringstream os;
  os << title << ":";
  for (int r = 0; r < world_size; ++r) {
    std::vector<int> ranks = group_of(r);
    if (ranks.empty() || !seen.insert(ranks).second) continue;
    os << " " << format_list(ranks);
  }
  if (seen.empty()) os << " none";
  os << "\n";
  return os.str();
}

}  // namespace

std::vector<std::string> gather_host_names(Communicator& world) {
  std::vector<int32_t> mine(kNameWords, 0);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  FEAST_MPI_CHECK(MPI_Get_processor_name(name, &length));
  std::memcpy(mine.data(), name, std::min<size_t>(static_cast<size_t>(length), MPI_MAX_PROCESSOR_NAME - 1));

  const auto n = static_cast<size_t>(world.size());
  std::vector<int32_t> all(n * kNameWords);
  const std::vector<size_t> counts(n, kNameWords);
  world.allgather(mine.data(), all.data(), counts, DType::kInt32)->wait();

  std::vector<std::string> hosts(n);
  for (size_t r = 0; r < n; ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data() + r * kNameWords);
    hosts[r] = std::string(bytes, strnlen(bytes, kNameWords * 4));
  }
  return hosts;
}

std::string describe_grid(const ParallelLayout& layout, const std::vector<std::string>& hosts, bool tied_embedding) {
  const int n = layout.world_size();
  FEAST_CHECK(hosts.size() == static_cast<size_t>(n),
              "describe_grid: " << hosts.size() << " host names for " << n << " ranks");
  std::ostringstream os;
  os << "parallel grid: " << n << " ranks = tp " << layout.tp() << " x pp " << layout.pp() << " x dp "
     << layout.dp() << " (order " << layout.order() << ", innermost first)\n";
  const int width = static_cast<int>(std::to_string(n - 1).size());
  for (int r = 0; r < n; ++r) {
    const RankCoord c = layout.coord(r);
    os << "  rank ";
    os.width(width);
    os << r << ": tp " << c.tp << " pp " << c.pp << " dp " << c.dp << "  host " << hosts[r] << "\n";
  }
  os << list_groups("tensor-parallel groups", n, [&](int r) { return layout.tp_group(r); });
  os << list_groups("pipeline groups", n, [&](int r) { return layout.pp_group(r); });
  os << list_groups("data-parallel groups", n, [&](int r) { return layout.dp_group(r); });
  if (tied_embedding) os << list_groups("embedding groups", n, [&](int r) { return layout.embedding_group(r); });

  std::set<std::vector<int>> warned;
  for (int r = 0; r < n; ++r) {
    const std::vector<int> group = layout.tp_group(r);
    std::vector<std::string> group_hosts;
    for (int member : group)
      if (std::find(group_hosts.begin(), group_hosts.end(), hosts[member]) == group_hosts.end())
        group_hosts.push_back(hosts[member]);
    if (group_hosts.size() < 2 || !warned.insert(group).second) continue;
    os << "warning: tensor-parallel group " << format_list(group) << " spans hosts ";
    for (size_t i = 0; i < group_hosts.size(); ++i) os << (i ? ", " : "") << group_hosts[i];
    os << ": its all-reduces will cross the network\n";
  }
  return os.str();
}

}  // namespace feast
