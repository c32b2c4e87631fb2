// Everything a resumed run needs, in one object (train/checkpointing.h saves and restores it):
// where training is, and references to this rank's parameters and optimizer state. The data
// position and the learning rate are functions of the step (invariant 5: the sampler reads
// step s's batch from positions drawn from (seed, s); the schedule is a function of s), and the
// random numbers are counter-based functions of the seed, so step and seed pin them down.
#pragma once

#include <cstdint>

#include "model/pipeline_stage.h"
#include "optim/adamw.h"
#include "config/config.h"
#include "optim/lr_schedule.h"

namespace feast {

// The learning-rate schedule the training keys describe.
inline LrSchedule lr_schedule_of(const TrainingConfig& t) {
  return {t.lr, t.min_lr, t.warmup_steps, t.steps, t.lr_schedule};
}

struct TrainingState {
  int64_t step = 0;         // optimizer steps taken; the next step to run (0-based)
  int64_t tokens_seen = 0;  // training tokens consumed by those steps, over all ranks
  uint64_t seed = 0;        // initialisation, data order
  int64_t skipped_steps = 0;  // steps whose update was skipped for a non-finite loss or norm
  PipelineStage* model = nullptr;  // this rank's parameters
  AdamW* optimizer = nullptr;      // this rank's master weights and moments

  // The sampler's position: the step whose batch comes next.
  int64_t data_step() const { return step; }
  // The learning rate of the next step.
  double learning_rate(const TrainingConfig& t) const {
    return feast::learning_rate(lr_schedule_of(t), step);
  }
};

}  // namespace feast
