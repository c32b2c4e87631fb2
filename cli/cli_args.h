// Small parsers for the verbs' command-line flags, shared so every verb words its errors alike.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

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

// The value of option args[i], which must be one of `known`, with i moved past it; otherwise a
// ConfigError ("<verb>: unknown option '--x'", or "needs a value") followed by the usage text.
inline const std::string& option_value(const std::vector<std::string>& args, size_t& i,
                                       std::initializer_list<std::string_view> known, const std::string& verb,
                                       const char* usage) {
  const std::string& a = args[i];
  if (std::find(known.begin(), known.end(), a) == known.end())
    throw ConfigError(verb + ": unknown option '" + a + "'\n" + usage);
  if (i + 1 >= args.size()) throw ConfigError(verb + ": " + a + " needs a value\n" + usage);
  return args[++i];
}

// The leading number of `value` and how many characters it took (0: none).
inline double leading_number(const std::string& value, size_t& used) {
  used = 0;
  try {
    return std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
    return 0;
  }
}

// The value of `flag` as a number, all of it; otherwise a ConfigError naming the flag and value.
inline double parse_number(const std::string& flag, const std::string& value) {
  size_t used = 0;
  const double v = leading_number(value, used);
  if (used == 0 || used != value.size()) throw ConfigError(flag + " expects a number, got '" + value + "'");
  return v;
}

// A byte count as people write it: "5GB", "500MB", "2GiB", "64K", "1000" (decimal units for
// KB/MB/GB, as transformers' max_shard_size; binary for KiB/MiB/GiB and the bare K/M/G).
inline uint64_t parse_size(const std::string& flag, const std::string& value) {
  size_t used = 0;
  const double number = leading_number(value, used);
  std::string unit = value.substr(used);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else if (unit == "K" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  if (used == 0 || scale == 0 || !(number > 0))
    throw ConfigError(flag + ": expected a size such as 5GB, 500MB or 2GiB, got '" + value + "'");
  return static_cast<uint64_t>(number * scale);
}

}  // namespace feast
