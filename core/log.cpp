#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <fstream>
#include <mutex>

#include <unistd.h>

namespace feast::log {
namespace {
int g_rank = 0;
int g_world_size = 1;
int g_quiet = 0;
std::ofstream g_file;
std::mutex g_file_mutex;  // the checkpoint writer's thread logs too
bool g_status_shown = false;  // a status line is on the screen, without its newline

void clear_status() {
  if (!g_status_shown) return;
  std::fputs("\r\033[K", stdout);
  g_status_shown = false;
}

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
  clear_status();
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
  to_file(line);
}

namespace {
// Open MPI gives every rank a pseudo-terminal for stdout whatever mpirun's own stdout is, so a
// rank that mpirun started (its parent, for ranks on mpirun's node) asks what mpirun writes to:
// a log file or a pipe gets plain lines, never redrawn status lines.
bool decide_terminal() {
  if (isatty(STDOUT_FILENO) != 1) return false;
  const char* term = std::getenv("TERM");
  if (term && std::string(term) == "dumb") return false;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return true;
  char target[256] = {};
  const std::string parent_stdout = "/proc/" + std::to_string(getppid()) + "/fd/1";
  const ssize_t n = readlink(parent_stdout.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  const std::string where(target, size_t(n));
  return where.starts_with("/dev/pts/") || where.starts_with("/dev/tty");
}
}  // namespace

bool stdout_is_terminal() {
  static const bool tty = decide_terminal();
  return tty;
}



void status(const std::string& line) {
  if (g_rank != 0 || g_quiet > 0 || !stdout_is_terminal()) return;
  std::fprintf(stdout, "\r%s\033[K", line.c_str());
  std::fflush(stdout);
  g_status_shown = true;
}

void note(const std::string& line) {
  if (g_rank != 0) return;
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void error(const std::string& line) {
  if (g_rank == 0) clear_status();
  if (g_world_size > 1)
    std::fprintf(stderr, "[rank %d] error: %s\n", g_rank, line.c_str());
  else
    std::fprintf(stderr, "error: %s\n", line.c_str());
  std::fflush(stderr);
  to_file("error: " + line);
}

}  // namespace feast::log
