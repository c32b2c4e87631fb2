// `trainer eval CONFIG`: the validation loss of the configured model at any layout, from the
// same machinery as training's evaluations (TrainingRun with RunPurpose::kEvaluate), with the
// weights a run of this config would start from: a checkpoint checkpoint.resume selects, else
// model.init_from, else the random initialisation (said plainly, since that is rarely meant).
#include "cli/eval.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"
#include "train/checkpointing.h"
#include "config/config_agreement.h"
#include "train/training_run.h"

namespace feast {

int eval_command(const Config& config, std::unique_ptr<Communicator> world) {
  agree_on_config(*world, config);  // before any check that could fail on some ranks only
  const LayoutPlan plan = check_run(config, world->size(), RunPurpose::kEvaluate);
  TrainingRun run(config, plan, std::move(world), RunPurpose::kEvaluate);
  // checkpoint.resume = "auto" looks in checkpoint.dir, which is known only when it or
  // logging.dir is set; eval creates no run directory of its own.
  std::optional<CheckpointMeta> meta;
  if (may_resume(config)) meta = resume_from_checkpoint(run, config);
  if (!meta && !config.model.init_from.empty()) run.import_initial_weights();
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

}  // namespace feast
