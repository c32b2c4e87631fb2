// Small parsers for the verbs' command-line flags, shared so every verb words its errors alike.
#pragma once

#include <string>

#include "core/error.h"

namespace feast {

// The value of `flag` as a positive int; otherwise a ConfigError naming the flag and the value,
// followed by the verb's usage text.
inline int parse_positive_int(const std::string& flag, const std::string& value, const char* usage) {
  try {
    size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used == value.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(flag + ": expected a positive integer, got '" + value + "'\n" + usage);
}

}  // namespace feast
