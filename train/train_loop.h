// The training loop of one rank in a dp x pp x tp job: builds the TrainingRun (every check
// before allocation), resumes from a checkpoint when checkpoint.resume finds one, runs to
// training.steps with periodic evaluation and checkpoints, and stops early (saving first) at
// training.exit_at_step, after training.exit_after_minutes, or on SIGTERM, SIGUSR1 or SIGINT.
// Rank 0 prints progress and writes metrics.jsonl and the resolved config to logging.dir.
// Losses and norms come from the ranks that own them, reduced to every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "train/metrics/run_summary.h"
#include "train/training_run.h"

namespace feast {

struct TrainSummary {
  int64_t first_step = 0;          // the step the run began at (0, or a checkpoint's)
  int64_t steps = 0;               // the step it ended at
  std::vector<double> losses;      // mean training loss of every step run (the same on every rank)
  std::vector<double> grad_norms;  // global gradient norm of every step run
  std::vector<std::optional<double>> val_losses;  // of every step run: its evaluation, if it had one
  double final_loss = 0;
  std::optional<double> final_val_loss;
  double tokens_per_s = 0;  // over the steps run but the first (when more ran), evaluation excluded
  std::vector<TimeSplit> splits;  // every step run's time split, averaged over ranks (the same on every rank)
  // Why it ended: "finished", "exit_at_step", "time limit", "preempted" (SIGTERM/SIGUSR1) or
  // "interrupted" (SIGINT); and the process exit code that goes with it.
  std::string ended = "finished";
  int exit_code = 0;
  std::optional<std::string> last_checkpoint;  // the newest checkpoint this run saved
  std::string run_dir;  // logging.dir as settled (a new directory when it was unset)
};

// Called on every rank (hooks may be collective): after each step, with its result, and once
// after the last step (tests read gradients and weights through the run).
struct TrainHooks {
  std::function<void(TrainingRun&, const StepResult&)> after_step;
  std::function<void(TrainingRun&)> at_end;
};

// world: the job's ranks (its size is checked against the layout). Throws ConfigError or
// DataError on bad input before allocating the model.
TrainSummary train(const Config& config, std::unique_ptr<Communicator> world, const TrainHooks& hooks = {});

}  // namespace feast
