#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace feast {

double learning_rate(const LrSchedule& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  if (t.kind == "constant") return t.lr;
  // The decay runs from lr at the first step after warm-up to min_lr at the last step that
  // runs (step = steps - 1).
  const int64_t decay_steps = t.steps - 1 - t.warmup_steps;
  if (decay_steps <= 0) return t.min_lr;  // the only step after warm-up is the last one
  const double progress = std::min(1.0, double(step - t.warmup_steps) / double(decay_steps));
  if (t.kind == "linear") return t.lr - (t.lr - t.min_lr) * progress;
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace feast
