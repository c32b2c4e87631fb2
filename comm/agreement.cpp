#include "comm/agreement.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"

namespace feast {
int lowest_rank_where(Communicator& group, bool flag) {
  // The interface reduces with max, so the minimum travels as the maximum of negated ranks.
  int32_t negated = flag ? -group.rank() : -std::numeric_limits<int32_t>::max();
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  group.allreduce(&negated, 1, DType::kInt32, max)->wait();
  return -negated == std::numeric_limits<int32_t>::max() ? -1 : -negated;
}

std::string broadcast_string(Communicator& group, const std::string& text, int root) {
  int64_t length = group.rank() == root ? int64_t(text.size()) : 0;
  group.broadcast(&length, 1, DType::kInt64, root)->wait();
  std::vector<int32_t> words(size_t(length + 3) / 4, 0);  // bytes travel as int32 words
  if (group.rank() == root) text.copy(reinterpret_cast<char*>(words.data()), text.size());
  group.broadcast(words.data(), words.size(), DType::kInt32, root)->wait();
  return std::string(reinterpret_cast<const char*>(words.data()), size_t(length));
}

std::optional<std::string> first_error(Communicator& group, const std::string& mine) {
  const int first = lowest_rank_where(group, !mine.empty());
  if (first < 0) return std::nullopt;
  return broadcast_string(group, mine, first);
}

void agree_on_error(Communicator& group, const std::string& mine) {
  const int first = lowest_rank_where(group, !mine.empty());
  if (first < 0) return;
  throw AgreedError(first == group.rank() ? mine : "rank " + std::to_string(first) + " failed",
                    first == group.rank());
}

}  // namespace feast
