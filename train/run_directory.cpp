#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "comm/agreement.h"

namespace fs = std::filesystem;

namespace feast {
namespace {

std::string stem_of(const Config& config) {
  return config.source.empty() ? "run" : fs::path(config.source).stem().string();
}

// runs/<config name>-<UTC date-time>, with -2, -3, ... when taken: created here, atomically, so
// that two runs started in the same second never share one.
std::string fresh_run_dir(const Config& config) {
  const std::string base = "runs/" + stem_of(config) + "-" + utc_stamp("%Y%m%d-%H%M%S");
  std::error_code ec;
  fs::create_directories("runs", ec);
  std::string dir = base;
  for (int n = 2; !fs::create_directory(dir, ec); ++n) {
    if (ec) throw Error("cannot create " + dir + ": " + ec.message());
    dir = base + "-" + std::to_string(n);
  }
  return dir;
}

// How the run whose resolved config.toml `dir` holds differs from this one in what makes it
// another run: its model (initialisation aside: init_from counts, since a resume would carry
// that run's weights on) or its data. One "key = theirs there, mine here" per difference; empty
// when they agree, or when there is no earlier config.toml or it cannot be read (an older
// version's, a hand-edited one: nothing to go by).
std::vector<std::string> another_runs_differences(const Config& config, const std::string& dir) {
  const fs::path saved_path = fs::path(dir) / "config.toml";
  std::error_code ec;
  // A resolved config is a few kB; anything else (a device, a huge file) is not one to read.
  if (!fs::is_regular_file(saved_path, ec) || fs::file_size(saved_path, ec) > (1u << 20)) return {};
  std::ifstream in(saved_path);
  const std::optional<Config> saved =
      read_saved_config(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
                        saved_path.string());
  if (!saved) return {};
  // config.toml holds paths absolute; both sides' are compared that way.
  const auto absolute_paths = [](Config c) {
    for (std::string* p : {&c.data.train, &c.data.val, &c.model.init_from})
      if (!p->empty()) *p = fs::absolute(*p).lexically_normal().string();
    return c;
  };
  std::vector<std::string> out;
  for (const KeyDifference& d : key_differences(absolute_paths(*saved), absolute_paths(config), [](const std::string& key) {
         return key == "data.train" || key == "data.val" ||
                (key.starts_with("model.") && key != "model.init_std" && key != "model.tokenizer");
       }))
    out.push_back(d.key + " = " + d.theirs + " there, " + d.mine + " here");
  return out;
}

// The newest earlier run of this config (logging.dir unset) that did not finish and left a
// complete checkpoint: a rerun of the same command continues it, as after a preemption or a
// crash. "" when there is none, or when that run was of another model or data (the same config
// file with other --set values): this run then gets a new directory.
std::string unfinished_run(const Config& config) {
  if (config.checkpoint.resume != "auto" || !config.checkpoint.dir.empty()) return "";
  const std::regex name(std::regex_replace(stem_of(config), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                        R"(-\d{8}-\d{6}(-\d+)?)");
  std::vector<std::string> runs;
  std::error_code ec;
  for (fs::directory_iterator it("runs", ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), name)) runs.push_back(it->path().string());
  std::sort(runs.rbegin(), runs.rend());  // the names sort by time
  for (const std::string& dir : runs) {
    std::ifstream in(fs::path(dir) / "status");
    std::string status;
    std::getline(in, status);
    if (status.starts_with("finished")) continue;
    if (CheckpointStore(default_checkpoint_dir(dir)).complete().empty()) continue;
    return another_runs_differences(config, dir).empty() ? dir : "";
  }
  return "";
}

// Locks `dir` for this run; false when another run holds it. A file system without flock
// (Lustre without -o flock, some NFS mounts) cannot guard the directory: said, and allowed.
bool lock_dir(const std::string& dir, int& fd, const std::string& what = "run directory") {
  fd = ::open((fs::path(dir) / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open " + dir + "/.lock: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  if (errno == EWOULDBLOCK) {
    ::close(fd);
    fd = -1;
    return false;
  }
  log::info(what + ": warning: cannot lock " + dir + "/.lock (" + std::strerror(errno) +
            "): this file system does not support flock, so nothing stops two runs from sharing " + dir);
  return true;
}

// Makes checkpoint.dir, so that an unusable one stops the run before its first step rather than
// at its first save (a stop's save would lose every step since the start); then locks it as the
// run directory is locked, since a second run saving there would set this run's checkpoints
// aside as superseded and rewrite `latest`. The run directory itself is locked already. Throws
// naming checkpoint.dir when it cannot. (Whether every rank can use it is proved after.)
void claim_checkpoint_dir(const Config& config, const std::string& run_dir, int& fd) {
  const std::string& dir = config.checkpoint.dir;
  const bool default_place = checkpoint_dir_is_default(config);
  const std::string named = default_place ? "checkpoint.dir (<logging.dir>/checkpoints: " + dir + ")"
                                          : config.where("checkpoint.dir") + ": checkpoint.dir = \"" + dir + "\"";
  const std::string fix = default_place ? "; set checkpoint.dir (or logging.dir) to a directory this run can write"
                                        : "; set checkpoint.dir to a directory this run can write, or leave it "
                                          "unset for <logging.dir>/checkpoints";
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw Error(named + " exists and is not a directory" + fix);
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw Error(named + " cannot be created: " + (ec ? ec.message() : "not a directory") + fix);
  if (fs::equivalent(dir, run_dir, ec)) return;
  if (!lock_dir(dir, fd, "checkpoint.dir"))
    throw Error(named + " is in use by another run that is still going (it holds " + dir +
                "/.lock); its checkpoints would be overwritten or set aside; give this run another checkpoint.dir, "
                "or leave it unset for <logging.dir>/checkpoints");
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
  out.close();
  if (!out) throw Error(path.string() + ": cannot write (" + std::strerror(errno) + ")");
}

}  // namespace

RunDirectory::RunDirectory(Config& config, Communicator& world) : rank0_(world.rank() == 0) {
  std::string error, dir, how;
  if (rank0_) {
    try {
      if (!config.logging.dir.empty()) {
        dir = config.logging.dir;
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec || !fs::is_directory(dir))
          throw Error("logging.dir = \"" + dir + "\" cannot be created: " + (ec ? ec.message() : "not a directory") +
                      "; choose a writable directory");
        if (!lock_dir(dir, lock_fd_))
          throw Error("logging.dir " + dir + " is in use by another run that is still going (it holds " + dir +
                      "/.lock; a run on a node that crashed may hold it until its lease expires); give this run "
                      "another logging.dir, or leave it unset for a directory of its own");
        // Another model or other data in a directory an earlier run left: its checkpoints would
        // be resumed (or refused), its metrics, status and TensorBoard curves mixed with this
        // run's. Refused before anything in it is touched.
        if (const std::vector<std::string> diff = another_runs_differences(config, dir); !diff.empty()) {
          std::string list;
          for (const std::string& d : diff) list += (list.empty() ? "" : "; ") + d;
          throw Error("logging.dir " + dir + " holds an earlier run of another model or data (its config.toml: " + list +
                      "); its checkpoints, metrics and TensorBoard files would mix with this run's. Give this run "
                      "a logging.dir of its own (or leave it unset for a new directory per run), or move " + dir +
                      " away first");
        }
      } else {
        dir = unfinished_run(config);
        if (!dir.empty() && lock_dir(dir, lock_fd_)) {
          how = "logging.dir unset: continuing the unfinished run of this config there";
        } else {
          dir = fresh_run_dir(config);
          how = "logging.dir unset: a new directory for this run";
          if (!lock_dir(dir, lock_fd_)) throw Error("cannot lock the new run directory " + dir);
        }
      }
      write_file(fs::path(dir) / "command.txt", config.command_line);
      write_file(fs::path(dir) / "status", "running since " + utc_stamp("%Y-%m-%d %H:%M:%S UTC"));
      log::set_file(dir + "/train.log");
      log::info("=== run started " + utc_stamp("%Y-%m-%d %H:%M:%S UTC") + ": " + config.command_line);
    } catch (const std::exception& e) {
      if (lock_fd_ >= 0) ::close(lock_fd_);
      lock_fd_ = -1;
      error = (config.logging.dir.empty() ? std::string("logging.dir (unset): ") : config.where("logging.dir") + ": ") +
              e.what();
    }
  }
  agree_on_error(world, error);
  if (config.logging.dir.empty()) {
    settle_logging_dir(config, broadcast_string(world, dir, 0), "inferred: the run's own directory");
    log::info("run directory: " + config.logging.dir + " (" + broadcast_string(world, how, 0) + ")");
  }
  infer_checkpoint_dir(config);  // a Config built in code has not had it inferred at parse time
  dir_ = config.logging.dir;

  if (rank0_) {
    try {
      claim_checkpoint_dir(config, dir_, checkpoint_lock_fd_);
    } catch (const std::exception& e) {
      error = e.what();
      // The run ends before it began: its status says why, and its directory is free again.
      finish("failed: " + error);
      release();
    }
  }
  agree_on_error(world, error);
  // Rank 0 can write in checkpoint.dir, and every rank sees it under its own config's name for it,
  // as each save proves again: found now, not at the first save.
  try {
    // Unique to this start, so that a probe left by an earlier one proves nothing.
    CheckpointStore(config.checkpoint.dir)
        .prove_shared(world, "start " + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  } catch (const AgreedError& e) {
    if (rank0_) {
      finish(std::string("failed: ") + e.what());
      release();
    }
    throw;
  }
}

RunDirectory::~RunDirectory() { release(); }

void RunDirectory::release() {
  if (!rank0_) return;
  log::set_file("");
  // Closing releases the locks.
  if (checkpoint_lock_fd_ >= 0) ::close(checkpoint_lock_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  checkpoint_lock_fd_ = lock_fd_ = -1;
}

void RunDirectory::finish(const std::string& status) {
  if (!rank0_) return;
  log::file_only("=== run ended: " + status);
  // Said, not thrown: the run's own outcome (often an error being handled) comes first.
  try {
    write_file(fs::path(dir_) / "status", status);
  } catch (const std::exception& e) {
    log::error(std::string("the run's status was not recorded: ") + e.what());
  }
}

}  // namespace feast
