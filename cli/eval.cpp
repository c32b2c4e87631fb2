// `trainer eval CONFIG`: the validation loss of the configured model at any layout, from the
// same machinery as training's evaluations (TrainingRun with RunPurpose::kEvaluate), with the
// weights a run of this config would start from: a checkpoint checkpoint.resume selects, else
// model.init_from, else the random initialisation (said plainly, since that is rarely meant).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/verb.h"
#include "comm/mpi_world.h"
#include "config/validate.h"
#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "train/checkpointing.h"
#include "config/config_agreement.h"
#include "train/training_run.h"

namespace feast {

namespace {

int run_eval(const Args& args, const VerbContext&) {
  const Config config = load_config(args.config_path(), args.overrides());
  auto world = make_mpi_world(std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000)));
  agree_on_config(*world, config);  // before any check that could fail on some ranks only
  const LayoutPlan plan = check_run(config, world->size(), RunPurpose::kEvaluate);
  TrainingRun run(config, plan, std::move(world), RunPurpose::kEvaluate);
  // checkpoint.resume = "auto" looks in checkpoint.dir, which is known only when it or
  // logging.dir is set; eval creates no run directory of its own.
  const std::optional<CheckpointMeta> meta = start_from_checkpoint_or_import(run, config);
  if (meta)
    log::info("eval: weights of the checkpoint at step " + std::to_string(meta->step));
  else if (!config.model.init_from.empty())
    log::info("eval: weights from model.init_from = " + config.model.init_from);
  else
    log::info("eval: warning: no checkpoint and no model.init_from: evaluating the random initialisation (seed " +
              std::to_string(config.training.seed) + ")");
  const int64_t windows = run.validation_windows();
  log::info("eval: " + count_of(windows, "window") + " of " + count_of(config.training.seq_len, "token") +
            (config.training.eval_batches == 0 ? " (all of data.val)" : ""));
  const double loss = run.validate().value();
  char line[96];
  std::snprintf(line, sizeof line, "perplexity=%.9g", std::exp(loss));
  log::info(line);
  std::snprintf(line, sizeof line, "val_loss=%.9g", loss);
  log::info(line);
  return 0;
}

}  // namespace

Verb eval_verb() {
  Verb v;
  v.name = "eval";
  v.summary = "the validation loss of the configured model, at any layout";
  CommandLine& cl = v.command_line;
  cl.verb = "eval";
  cl.synopsis = "[mpirun -np N] trainer eval CONFIG.toml [--set section.key=value ...]";
  cl.description =
      "The validation loss of the configured model over training.eval_batches batches of data.val (every\n"
      "window once when 0), at any layout. Weights: the checkpoint checkpoint.resume selects (a file, a\n"
      "directory, or with \"auto\" the newest in checkpoint.dir), else model.init_from. Prints perplexity and\n"
      "then, as its last line, val_loss=<value>.";
  cl.takes_config = true;
  v.run = run_eval;
  return v;
}

}  // namespace feast
