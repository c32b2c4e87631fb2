#include "core/log.h"

#include <cstdio>

namespace feast::log {
namespace {
int g_rank = 0;
int g_world_size = 1;
int g_quiet = 0;
}

Quiet::Quiet() { ++g_quiet; }
Quiet::~Quiet() { --g_quiet; }

void set_rank(int r, int world_size) {
  g_rank = r;
  g_world_size = world_size;
}

void info(const std::string& line) {
  if (g_rank != 0 || g_quiet > 0) return;
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void error(const std::string& line) {
  if (g_world_size > 1)
    std::fprintf(stderr, "[rank %d] error: %s\n", g_rank, line.c_str());
  else
    std::fprintf(stderr, "error: %s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace feast::log
