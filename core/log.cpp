#include "core/log.h"

#include <cstdio>
#include <fstream>
#include <mutex>

namespace feast::log {
namespace {
int g_rank = 0;
int g_world_size = 1;
int g_quiet = 0;
std::ofstream g_file;
std::mutex g_file_mutex;  // the checkpoint writer's thread logs too

void to_file(const std::string& line) {
  const std::lock_guard<std::mutex> lock(g_file_mutex);
  if (!g_file.is_open()) return;
  g_file << line << "\n";
  g_file.flush();
}
}  // namespace

void set_file(const std::string& path) {
  const std::lock_guard<std::mutex> lock(g_file_mutex);
  if (g_file.is_open()) g_file.close();
  if (!path.empty() && g_rank == 0) g_file.open(path, std::ios::app);
}

void file_only(const std::string& line) {
  if (g_rank == 0) to_file(line);
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
  to_file(line);
}

void note(const std::string& line) {
  if (g_rank != 0) return;
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void error(const std::string& line) {
  if (g_world_size > 1)
    std::fprintf(stderr, "[rank %d] error: %s\n", g_rank, line.c_str());
  else
    std::fprintf(stderr, "error: %s\n", line.c_str());
  std::fflush(stderr);
  to_file("error: " + line);
}

}  // namespace feast::log
