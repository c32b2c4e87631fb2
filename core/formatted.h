// One number through a printf format, as a string: the cells of the tables `trainer plan` and
// `trainer bench comm` print.
#pragma once

#include <cstdio>
#include <string>

namespace feast {

inline std::string formatted(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace feast
