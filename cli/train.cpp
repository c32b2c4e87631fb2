// `trainer CONFIG.toml` (or `trainer train CONFIG.toml`): the training run the config describes,
// on every rank of the job; prints why it stopped and how to go on when it stops early.
#include <chrono>
#include <cstdio>

#include "cli/verb.h"
#include "comm/mpi_world.h"
#include "config/config.h"
#include "backend/cpu/blas_library.h"
#include "core/device_info.h"
#include "core/log.h"
#include "core/plural.h"
#include "train/train_loop.h"

namespace feast {

namespace {

int run_train(const Args& args, const VerbContext& context) {
  Config config = load_config(args.config_path(), args.overrides());
  config.command_line = context.command_line;
  log::info("feast trainer: " + args.config_path() + " (" + describe_devices() + "; " +
            std::to_string(context.world_size) + " rank(s))");
  if (config.training.device == "cpu") log::info("cpu kernels: " + cpu::describe_blas());
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000));
  const TrainSummary s = train(config, make_mpi_world(timeout));
  if (s.ended != "finished") {
    log::info("stopped (" + s.ended + ") at step " + std::to_string(s.steps) + "; exit code " +
              std::to_string(s.exit_code) + (s.last_checkpoint ? "; checkpoint " + *s.last_checkpoint : "") +
              "; run again with the same config to continue");
    return s.exit_code;
  }
  if (s.losses.empty()) {
    log::info("done: nothing to train (already at step " + std::to_string(s.steps) + ")");
    return 0;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, ", final loss %.4f", s.final_loss);
  std::string line = "done: " + count_of(s.steps, "step") + buf;
  if (s.final_val_loss) {
    std::snprintf(buf, sizeof buf, ", final val loss %.4f", *s.final_val_loss);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, ", %.0f tokens/s; metrics in %s/metrics.jsonl", s.tokens_per_s, s.run_dir.c_str());
  log::info(line + buf);
  return 0;
}

}  // namespace

Verb train_verb() {
  Verb v;
  v.name = "train";
  v.summary = "train as configured (the same as `trainer CONFIG.toml`)";
  CommandLine& cl = v.command_line;
  cl.verb = "train";
  cl.synopsis = "[mpirun -np N] trainer [train] CONFIG.toml [--set section.key=value ...]";
  cl.description =
      "Trains the model the config describes with the parallel layout it names (parallel.tp * pp * dp\n"
      "ranks), resuming from checkpoint.dir when a checkpoint is there, and writes the run directory\n"
      "(logging.dir: config.toml, metrics.jsonl, train.log, checkpoints). Ctrl-C, SIGTERM and SIGUSR1\n"
      "save a checkpoint and stop; running the same command again continues. docs/config.md lists\n"
      "every key.";
  cl.takes_config = true;
  v.run = run_train;
  return v;
}

}  // namespace feast
