// Counts in messages: "1 token", "2 tokens", "1 rank".
#pragma once

#include <cstdint>
#include <string>

namespace feast {

inline std::string count_of(int64_t n, const std::string& singular, const std::string& plural = "") {
  return std::to_string(n) + " " + (n == 1 ? singular : plural.empty() ? singular + "s" : plural);
}

}  // namespace feast
