// Numbers as the tables and messages print them: one number through a printf format (the cells of
// `trainer plan` and `trainer bench comm`), and a byte count in binary units ("2.00 GiB").
#pragma once

#include <cstdio>
#include <string>

namespace feast {

inline std::string formatted(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "512 B", "13.06 MiB", "2.00 GiB": the largest binary unit the value reaches.
inline std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return formatted(u == 0 ? "%.0f " : "%.2f ", bytes) + units[u];
}

}  // namespace feast
