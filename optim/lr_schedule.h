// The learning rate as a pure function of the step: linear warm-up, then cosine, linear or
// constant decay to a floor. A resumed run computes the same rate for the same step.
#pragma once

#include <cstdint>
#include <string>

namespace feast {

// training.lr, min_lr, warmup_steps, steps and lr_schedule, as the config validated them.
struct LrSchedule {
  double lr = 1e-3;          // peak, reached at the end of warm-up
  double min_lr = 1e-4;      // reached at the last step
  int64_t warmup_steps = 0;  // linear warm-up from lr / warmup_steps
  int64_t steps = 1;         // the run's length: the decay ends at step steps - 1
  std::string kind = "cosine";  // "cosine", "linear" or "constant"
};

// Learning rate of 0-based step `step`.
double learning_rate(const LrSchedule& schedule, int64_t step);

}  // namespace feast
