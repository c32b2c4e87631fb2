#include "core/log.h"

#include <cstdio>

namespace feast::log {
namespace {
int g_rank = 0;
int g_quiet = 0;
}

Quiet::Quiet() { ++g_quiet; }
Quiet::~Quiet() { --g_quiet; }

void set_rank(int r) { g_rank = r; }

void info(const std::string& line) {
  if (g_rank != 0 || g_quiet > 0) return;
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void error(const std::string& line) {
  std::fprintf(stderr, "[rank %d] error: %s\n", g_rank, line.c_str());
  std::fflush(stderr);
}

}  // namespace feast::log
