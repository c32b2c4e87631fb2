#include "comm/topology/gpu_link_report.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "comm/topology/grid_report.h"

namespace feast {
namespace {

// Every host's ranks in world-rank order.
std::map<std::string, std::vector<int>> ranks_by_host(const std::vector<std::string>& hosts) {
  std::map<std::string, std::vector<int>> by_host;
  for (size_t r = 0; r < hosts.size(); ++r) by_host[hosts[r]].push_back(int(r));
  return by_host;
}

// Host h's matrix, relabelled by local rank (so hosts wired alike compare equal).
std::vector<std::vector<GpuLink>> matrix_of(const std::vector<int>& ranks, const HostGpuLinks& links) {
  std::vector<std::vector<GpuLink>> m;
  for (int r : ranks) m.push_back(links[size_t(r)]);
  return m;
}

}  // namespace

HostGpuLinks gather_gpu_links(Communicator& world, const std::vector<std::string>& hosts,
                              const std::vector<GpuUuid>& uuids, std::string* why) {
  const size_t n = size_t(world.size()), me = size_t(world.rank());
  FEAST_CHECK(hosts.size() == n && uuids.size() == n,
              "gather_gpu_links: " << hosts.size() << " host names and " << uuids.size() << " GPUs for " << n << " ranks");
  const std::map<std::string, std::vector<int>> by_host = ranks_by_host(hosts);
  size_t widest = 0;
  for (const auto& [host, ranks] : by_host) widest = std::max(widest, ranks.size());
  // This rank's row: its links to the ranks on its host.
  const std::vector<int>& local = by_host.at(hosts[me]);
  std::vector<GpuUuid> peers;
  for (int r : local) peers.push_back(uuids[size_t(r)]);
  const std::vector<GpuLink> row = probe_gpu_links(uuids[me], peers, why);
  std::vector<int32_t> rows(widest * n, int32_t(GpuLink::kUnknown));
  for (size_t i = 0; i < row.size(); ++i) rows[widest * me + i] = int32_t(row[i]);
  world.allgather(rows.data() + widest * me, rows.data(), std::vector<size_t>(n, widest), DType::kInt32)->wait();
  HostGpuLinks links(n);
  for (size_t r = 0; r < n; ++r) {
    const size_t count = by_host.at(hosts[r]).size();
    for (size_t i = 0; i < count; ++i) links[r].push_back(GpuLink(rows[widest * r + i]));
  }
  return links;
}

std::string describe_gpu_links(const ParallelLayout& layout, const std::vector<std::string>& hosts,
                               const HostGpuLinks& links, const std::string& why) {
  const std::map<std::string, std::vector<int>> by_host = ranks_by_host(hosts);
  if (std::none_of(by_host.begin(), by_host.end(), [](const auto& h) { return h.second.size() > 1; })) return "";
  std::ostringstream os;
  // Hosts wired alike share one matrix.
  std::map<std::vector<std::vector<GpuLink>>, std::vector<std::string>> alike;
  std::vector<std::vector<std::vector<GpuLink>>> order;
  std::set<GpuLink> seen;
  for (const auto& [host, ranks] : by_host) {
    if (ranks.size() < 2) continue;
    const std::vector<std::vector<GpuLink>> m = matrix_of(ranks, links);
    if (alike[m].empty()) order.push_back(m);
    alike[m].push_back(host);
    for (const auto& row : m) seen.insert(row.begin(), row.end());
  }
  for (const auto& m : order) {
    const std::vector<std::string>& names = alike[m];
    os << "GPU links on " << names.front();
    if (names.size() > 1) os << " and " << names.size() - 1 << " more host" << (names.size() > 2 ? "s" : "") << " alike";
    os << " (by local rank):\n      ";
    for (size_t j = 0; j < m.size(); ++j) os << std::setw(5) << j;
    os << "\n";
    for (size_t i = 0; i < m.size(); ++i) {
      os << std::setw(6) << i;
      for (GpuLink l : m[i]) os << std::setw(5) << gpu_link_code(l);
      os << "\n";
    }
  }
  os << "  ";
  bool first = true;
  for (GpuLink l : seen) {
    os << (first ? "" : ", ") << gpu_link_code(l) << " = " << gpu_link_meaning(l);
    first = false;
  }
  os << "\n";
  if (seen.count(GpuLink::kUnknown) && !why.empty()) os << "  links unknown: " << why << "\n";

  // Tensor-parallel groups whose GPUs on one host meet over a slow link.
  std::set<std::vector<int>> checked;
  int warnings = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    const std::vector<int> group = layout.tp_group(r);
    if (!checked.insert(group).second) continue;
    GpuLink worst = GpuLink::kNvlink;
    int a = -1, b = -1;
    for (int x : group)
      for (int y : group) {
        if (x >= y || hosts[size_t(x)] != hosts[size_t(y)]) continue;
        const GpuLink l = links[size_t(x)][size_t(local_rank(hosts, y))];
        if (slow_for_tensor_parallel(l) && (a < 0 || int(l) > int(worst))) {
          worst = l;
          a = x;
          b = y;
        }
      }
    if (a < 0) continue;
    if (++warnings > 3) continue;
    os << "warning: tensor-parallel group " << format_list(group) << " joins ranks " << a << " and " << b << " over "
       << gpu_link_code(worst) << " (" << gpu_link_meaning(worst)
       << "): its all-reduces run on every layer; give a tensor-parallel group GPUs joined by NVLink (the group "
          "is consecutive ranks: bind local ranks to GPUs so that neighbours share NVLink) or lower parallel.tp\n";
  }
  if (warnings > 3)
    os << "warning: " << warnings - 3 << " more tensor-parallel group" << (warnings > 4 ? "s" : "")
       << " on slow links\n";
  std::string s = os.str();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace feast
