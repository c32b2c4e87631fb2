#include "cli/inspect.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/log.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: trainer inspect CHECKPOINT.h5 [--no-config]\n"
    "Prints the checkpoint's step, tokens seen, seed and saved layout, each tensor with its shape\n"
    "and checksum status (every byte is read and checked), then the config it was saved with.\n"
    "Exits 1 when a tensor fails its checksum or cannot be read.\n";

}  // namespace

namespace {
int inspect(const std::string& path, bool show_config);
}  // namespace

int inspect_command(const std::vector<std::string>& args) {
  std::string path;
  bool show_config = true;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    }
    if (a == "--no-config") {
      show_config = false;
    } else if (a.rfind("--", 0) == 0) {
      throw ConfigError("inspect: unknown option '" + a + "'\n" + kUsage);
    } else if (path.empty()) {
      path = a;
    } else {
      throw ConfigError("inspect: more than one checkpoint given ('" + path + "' and '" + a + "')");
    }
  }
  if (path.empty()) throw ConfigError(std::string("inspect: name a checkpoint file\n") + kUsage);
  if (!std::filesystem::is_regular_file(path)) throw ConfigError("inspect: " + path + ": no such checkpoint file");
  try {
    return inspect(path, show_config);
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string("inspect: ") + e.what());  // one line, no MPI abort: nothing else runs
  }
}

namespace {

int inspect(const std::string& path, bool show_config) {
  const CheckpointMeta m = read_checkpoint_meta(path);
  char line[512];
  std::snprintf(line, sizeof line, "checkpoint %s (%.1f MiB)", path.c_str(),
                double(std::filesystem::file_size(path)) / (1024.0 * 1024.0));
  log::info(line);
  std::snprintf(line, sizeof line, "format version %d, step %lld, tokens seen %lld, seed %llu, skipped steps %lld",
                m.format_version, static_cast<long long>(m.step), static_cast<long long>(m.tokens_seen),
                static_cast<unsigned long long>(m.seed), static_cast<long long>(m.skipped_steps));
  log::info(line);
  log::info("saved at layout: " + m.layout + "; global batch " + std::to_string(m.global_batch) + " sequences");
  const std::vector<DatasetReport> reports = verify_checkpoint(path);
  log::info("tensors (" + std::to_string(reports.size()) + "): name | shape | dtype | crc32 | status");
  int bad = 0;
  for (const DatasetReport& r : reports) {
    std::string status = "ok";
    if (!r.error.empty()) status = "UNREADABLE: " + r.error;
    else if (!r.stored_crc) status = "no checksum stored";
    else if (*r.stored_crc != r.actual_crc) status = "CHECKSUM MISMATCH";
    if (!r.ok()) ++bad;
    std::snprintf(line, sizeof line, "  %-44s %-14s %-8s %08x  %s", r.name.c_str(), format_shape(r.shape).c_str(),
                  r.dtype.c_str(), r.stored_crc.value_or(0), status.c_str());
    log::info(line);
  }
  log::info(bad == 0 ? "checksums: all " + std::to_string(reports.size()) + " tensors verified"
                     : "checksums: " + std::to_string(bad) + " of " + std::to_string(reports.size()) +
                           " tensors failed; the checkpoint is corrupt");
  if (show_config) log::info("config it was saved with:\n" + m.config);
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace feast
