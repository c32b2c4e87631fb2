// How ZeRO divides a stage's flat buffer among its data-parallel ranks: contiguous, nearly equal
// ranges in rank order (the last may be shorter). Buckets and the optimizer use these ranges.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace feast {

struct ShardRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

inline ShardRange shard_range(size_t total, int parts, int index) {
  const size_t per = (total + size_t(parts) - 1) / size_t(parts);
  const size_t b = std::min(total, per * size_t(index));
  return {b, std::min(total, b + per)};
}

// Elements of [begin, end) owned by each of `parts` ranks, in rank order (reduce-scatter counts).
inline std::vector<size_t> shard_counts(size_t total, int parts, size_t begin, size_t end) {
  std::vector<size_t> counts(static_cast<size_t>(parts));
  for (int r = 0; r < parts; ++r) {
    const ShardRange s = shard_range(total, parts, r);
    const size_t b = std::max(begin, s.begin), e = std::min(end, s.end);
    counts[size_t(r)] = b < e ? e - b : 0;
  }
  return counts;
}

}  // namespace feast
