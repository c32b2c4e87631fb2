#include "comm/topology/nccl_network_report.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <regex>
#include <sstream>

namespace feast {

std::string capture_nccl_network_report(const std::string& dir) {
  if (std::getenv("NCCL_DEBUG") != nullptr || dir.empty()) return "";
  // A file NCCL cannot open sends its lines to stdout instead.
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return "";
  const std::string path = dir + "/nccl_debug." + std::to_string(getpid()) + ".log";
  // NCCL reads these when it initialises, once per process.
  setenv("NCCL_DEBUG", "INFO", 1);
  if (std::getenv("NCCL_DEBUG_SUBSYS") == nullptr) setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
  setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
  return path;
}

std::string nccl_network_from_log(const std::string& text) {
  // "... NCCL INFO Using network IB" (src/init.cc) and "... NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:..."
  // (each transport's init); the last of each wins.
  static const std::regex network(R"(NCCL INFO Using network (.+?)\s*$)");
  static const std::regex devices(R"(NCCL INFO NET/(\S+) : Using (.+?)\s*(; OOB.*)?$)");
  std::string name, used_by, used;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, network)) name = m[1];
    else if (std::regex_search(line, m, devices)) used_by = m[1], used = m[2];
  }
  if (name.empty()) name = used_by;
  if (name.empty()) return "";
  return used.empty() || used_by != name ? name : name + " (" + used + ")";
}

}  // namespace feast
