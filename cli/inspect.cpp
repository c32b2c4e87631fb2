// `trainer inspect CHECKPOINT`: a checkpoint's metadata and every tensor with its checksum verified, read
// by one process with the same code a resume reads it with.
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_store.h"
#include "cli/verb.h"
#include "core/error.h"
#include "core/log.h"

namespace feast {

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

int run_inspect(const Args& args, const VerbContext&) {
  std::string path = args.positional().front();
  if (std::filesystem::is_directory(path)) {  // a checkpoint directory: its newest checkpoint
    const std::vector<std::string> found = CheckpointStore(path).complete();
    if (found.empty())
      throw ConfigError("inspect: " + path + " is a directory holding no complete checkpoint (step_*.h5); name a "
                        "checkpoint file or a checkpoint directory");
    path = found.front();
  } else if (!std::filesystem::is_regular_file(path)) {
    throw ConfigError("inspect: " + path + ": no such checkpoint file or directory");
  }
  try {
    return inspect(path, !args.flag("--no-config"));
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string("inspect: ") + e.what());  // one line, no MPI abort: nothing else runs
  }
}

}  // namespace

Verb inspect_verb() {
  Verb v;
  v.name = "inspect";
  v.summary = "what a checkpoint holds; verifies every tensor's checksum";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "inspect";
  cl.synopsis = "trainer inspect CHECKPOINT [--no-config]";
  cl.description =
      "Prints the checkpoint's step, tokens seen, seed and saved layout, each tensor with its shape\n"
      "and checksum status (every byte is read and checked), then the config it was saved with.\n"
      "CHECKPOINT is a file (step_00000020.h5) or a checkpoint directory (its newest checkpoint).\n"
      "Exits 1 when a tensor fails its checksum or cannot be read.";
  cl.positional = "a checkpoint file or directory";
  cl.min_positional = cl.max_positional = 1;
  cl.options = {{"--no-config", ValueKind::kFlag, "", "leave out the config it was saved with"}};
  v.run = run_inspect;
  return v;
}

}  // namespace feast
