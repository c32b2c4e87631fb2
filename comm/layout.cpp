// ParallelLayout: rank <-> (tp, pp, dp) coordinates as a mixed-radix number whose digits are
// ordered by `order` (innermost first), and the group lists that follow from it.
#include "comm/layout.h"

#include "core/error.h"

namespace feast {
namespace {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::kTp: return "tp";
    case Axis::kPp: return "pp";
    case Axis::kDp: return "dp";
  }
  return "?";
}

// The RankCoord field that holds axis a, so one loop serves all three axes.
int RankCoord::*field(Axis a) {
  switch (a) {
    case Axis::kTp: return &RankCoord::tp;
    case Axis::kPp: return &RankCoord::pp;
    case Axis::kDp: return &RankCoord::dp;
  }
  return &RankCoord::tp;
}

std::array<Axis, 3> parse_order(const std::string& order) {
  const auto bad = [&] {
    return ConfigError("parallel.order = \"" + order +
                       "\" is not a permutation of tp, dp, pp written like \"tp-dp-pp\"");
  };
  if (order.size() != 8 || order[2] != '-' || order[5] != '-') throw bad();
  std::array<Axis, 3> axes{};
  bool seen[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    const std::string name = order.substr(3 * i, 2);
    Axis a;
    if (name == "tp") a = Axis::kTp;
    else if (name == "pp") a = Axis::kPp;
    else if (name == "dp") a = Axis::kDp;
    else throw bad();
    if (seen[static_cast<int>(a)]) throw bad();
    seen[static_cast<int>(a)] = true;
    axes[i] = a;
  }
  return axes;
}

void check_degree(const char* key, int degree) {
  if (degree < 1)
    throw ConfigError(std::string("parallel.") + key + " = " + std::to_string(degree) +
                      " must be at least 1");
}

}  // namespace

ParallelLayout::ParallelLayout(int tp, int pp, int dp, const std::string& order)
    : tp_(tp), pp_(pp), dp_(dp), order_name_(order), order_(parse_order(order)) {
  check_degree("tp", tp);
  check_degree("pp", pp);
  check_degree("dp", dp);
}

int ParallelLayout::size_of(Axis a) const {
  switch (a) {
    case Axis::kTp: return tp_;
    case Axis::kPp: return pp_;
    case Axis::kDp: return dp_;
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
  for (int i = 2; i >= 0; --i) {
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
std::vector<int> ParallelLayout::dp_group(int rank) const { return group_along(rank, Axis::kDp); }

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
