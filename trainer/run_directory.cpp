#include "trainer/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "parallel/agreement.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

std::string utc_stamp(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// runs/<config name>-<UTC date-time>, with -2, -3, ... when that exists already.
std::string fresh_run_dir(const Config& config) {
  const std::string stem = config.source.empty() ? "run" : fs::path(config.source).stem().string();
  const std::string base = "runs/" + stem + "-" + utc_stamp("%Y%m%d-%H%M%S");
  std::string dir = base;
  for (int n = 2; fs::exists(dir); ++n) dir = base + "-" + std::to_string(n);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
}

}  // namespace

RunDirectory::RunDirectory(Config& config, Communicator& world) : rank0_(world.rank() == 0) {
  std::string error, dir;
  if (rank0_) {
    try {
      dir = config.logging.dir.empty() ? fresh_run_dir(config) : config.logging.dir;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) throw Error("logging.dir = \"" + dir + "\" cannot be created: " + ec.message() +
                          "; choose a writable directory");
      lock_fd_ = ::open((fs::path(dir) / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (lock_fd_ < 0) throw Error("cannot open " + dir + "/.lock: " + std::strerror(errno));
      if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
        throw Error("logging.dir " + dir + " is in use by another run that is still going (it holds " + dir +
                    "/.lock); give this run another logging.dir, or leave it unset for a directory of its own");
      write_file(fs::path(dir) / "command.txt", config.command_line);
      write_file(fs::path(dir) / "status", "running since " + utc_stamp("%Y-%m-%d %H:%M:%S UTC"));
      log::set_file(dir + "/train.log");
      log::info("=== run started " + utc_stamp("%Y-%m-%d %H:%M:%S UTC") + ": " + config.command_line);
    } catch (const std::exception& e) {
      error = (config.logging.dir.empty() ? std::string("logging.dir (unset): ") : config.where("logging.dir") + ": ") +
              e.what();
    }
  }
  agree_on_error(world, error);
  if (config.logging.dir.empty()) {
    config.logging.dir = broadcast_string(world, dir, 0);
    config.origin["logging.dir"] = "inferred: a directory of this run's own";
    log::info("run directory: " + config.logging.dir + " (logging.dir unset: a new directory for this run)");
  }
  dir_ = config.logging.dir;
}

RunDirectory::~RunDirectory() {
  if (!rank0_) return;
  log::set_file("");
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

void RunDirectory::finish(const std::string& status) {
  if (!rank0_) return;
  log::file_only("=== run ended: " + status);
  write_file(fs::path(dir_) / "status", status);
}

}  // namespace feast
