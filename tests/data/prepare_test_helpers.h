// What the preparation tests share: the tokens of a list of shards as bytes, to compare with
// the text they were prepared from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace feast::testing {

inline std::string bytes_of(const std::vector<std::string>& shards) {
  std::string out;
  for (const auto& path : shards) {
    const Shard s(path);
    std::vector<int32_t> tokens(static_cast<size_t>(s.size()));
    s.read(0, s.size(), tokens.data());
    for (int32_t t : tokens) out.push_back(static_cast<char>(t));
  }
  return out;
}

}  // namespace feast::testing
