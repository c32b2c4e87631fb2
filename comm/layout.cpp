// ParallelLayout: rank <-> (tp, pp, dp, cp) coordinates as a mixed-radix number whose digits are
// ordered by `order` (innermost first), and the group lists that follow from it.
#include "comm/layout.h"

#include <algorithm>

#include "core/error.h"

namespace feast {
namespace {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::kTp: return "tp";
    case Axis::kPp: return "pp";
    case Axis::kDp: return "dp";
    case Axis::kCp: return "cp";
  }
  return "?";
}

// The RankCoord field that holds axis a, so one loop serves all four axes.
int RankCoord::*field(Axis a) {
  switch (a) {
    case Axis::kTp: return &RankCoord::tp;
    case Axis::kPp: return &RankCoord::pp;
    case Axis::kDp: return &RankCoord::dp;
    case Axis::kCp: return &RankCoord::cp;
  }
  return &RankCoord::tp;
}

// Three axes (cp then goes just outside tp) or all four, innermost first.
std::array<Axis, 4> parse_order(const std::string& order) {
  const auto bad = [&] {
    return ConfigError("parallel.order = \"" + order +
                       "\" is not a permutation of tp, dp, pp written like \"tp-dp-pp\" (or of tp, cp, dp, pp "
                       "like \"tp-cp-dp-pp\")");
  };
  const size_t n = (order.size() + 1) / 3;
  if ((n != 3 && n != 4) || order.size() != 3 * n - 1) throw bad();
  std::vector<Axis> axes;
  bool seen[4] = {false, false, false, false};
  for (size_t i = 0; i < n; ++i) {
    if (i + 1 < n && order[3 * i + 2] != '-') throw bad();
    const std::string name = order.substr(3 * i, 2);
    Axis a;
    if (name == "tp") a = Axis::kTp;
    else if (name == "pp") a = Axis::kPp;
    else if (name == "dp") a = Axis::kDp;
    else if (name == "cp") a = Axis::kCp;
    else throw bad();
    if (seen[static_cast<int>(a)]) throw bad();
    seen[static_cast<int>(a)] = true;
    axes.push_back(a);
  }
  if (n == 3) {
    if (seen[static_cast<int>(Axis::kCp)]) throw bad();
    axes.insert(std::find(axes.begin(), axes.end(), Axis::kTp) + 1, Axis::kCp);
  }
  return {axes[0], axes[1], axes[2], axes[3]};
}

void check_degree(const char* key, int degree) {
  if (degree < 1)
    throw ConfigError(std::string("parallel.") + key + " = " + std::to_string(degree) +
                      " must be at least 1");
}

}  // namespace

ParallelLayout::ParallelLayout(int tp, int pp, int dp, const std::string& order, int cp)
    : tp_(tp), pp_(pp), dp_(dp), cp_(cp), order_name_(order), order_(parse_order(order)) {
  check_degree("tp", tp);
  check_degree("pp", pp);
  check_degree("dp", dp);
  check_degree("cp", cp);
  if (cp > 1 && order.size() == 8) {  // written out with cp in its place
    std::vector<std::string> names;
    for (Axis a : order_) names.emplace_back(axis_name(a));
    order_name_ = names[0] + "-" + names[1] + "-" + names[2] + "-" + names[3];
  }
}

int ParallelLayout::size_of(Axis a) const {
  switch (a) {
    case Axis::kTp: return tp_;
    case Axis::kPp: return pp_;
    case Axis::kDp: return dp_;
    case Axis::kCp: return cp_;
  }
  return 0;
}

RankCoord ParallelLayout::coord(int rank) const {
  FEAST_CHECK(rank >= 0 && rank < world_size(),
              "rank " << rank << " outside a world of " << world_size());
  RankCoord c;
  for (Axis a : order_) {
    c.*field(a) = rank % size_of(a);
    rank /= size_of(a);
  }
  return c;
}

int ParallelLayout::rank_of(const RankCoord& c) const {
  int rank = 0;
  // Horner from the outermost digit in.
  for (int i = 3; i >= 0; --i) {
    const Axis a = order_[i];
    const int x = c.*field(a);
    FEAST_CHECK(x >= 0 && x < size_of(a),
                axis_name(a) << " coordinate " << x << " outside degree " << size_of(a));
    rank = rank * size_of(a) + x;
  }
  return rank;
}

std::vector<int> ParallelLayout::group_along(int rank, Axis axis) const {
  RankCoord c = coord(rank);
  std::vector<int> ranks(size_of(axis));
  for (int i = 0; i < size_of(axis); ++i) {
    c.*field(axis) = i;
    ranks[i] = rank_of(c);
  }
  return ranks;
}

std::vector<int> ParallelLayout::tp_group(int rank) const { return group_along(rank, Axis::kTp); }
std::vector<int> ParallelLayout::pp_group(int rank) const { return group_along(rank, Axis::kPp); }
std::vector<int> ParallelLayout::cp_group(int rank) const { return group_along(rank, Axis::kCp); }

std::vector<int> ParallelLayout::dp_group(int rank) const {
  RankCoord c = coord(rank);
  std::vector<int> ranks(static_cast<size_t>(replicas()));
  for (c.dp = 0; c.dp < dp_; ++c.dp)
    for (c.cp = 0; c.cp < cp_; ++c.cp) ranks[size_t(replica_index(c))] = rank_of(c);
  return ranks;
}

std::vector<int> ParallelLayout::embedding_group(int rank) const {
  if (!is_first_stage(rank) && !is_last_stage(rank)) return {};
  const std::vector<int> stages = pp_group(rank);
  if (pp_ == 1) return {stages.front()};
  return {stages.front(), stages.back()};
}

std::string format_list(const std::vector<int>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::string format_ranges(const std::vector<int>& ascending) {
  std::string out;
  for (size_t i = 0; i < ascending.size();) {
    size_t j = i;
    while (j + 1 < ascending.size() && ascending[j + 1] == ascending[j] + 1) ++j;
    if (i) out += ',';
    out += std::to_string(ascending[i]);
    if (j > i) out.append("-").append(std::to_string(ascending[j]));
    i = j + 1;
  }
  return out;
}

}  // namespace feast
