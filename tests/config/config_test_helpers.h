// What the config tests share: a config parsed from TOML text as the file "demo.toml", and the
// [data] section most of them need.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace feast::testing {

inline Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "demo.toml", overrides);
}

inline const std::string kData = "[data]\ntrain = \"t.bin\"\n";

}  // namespace feast::testing
