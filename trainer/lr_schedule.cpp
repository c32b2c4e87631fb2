#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace feast {

double learning_rate(const TrainingConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  if (t.lr_schedule == "constant") return t.lr;
  const int64_t decay_steps = std::max<int64_t>(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, double(step - t.warmup_steps) / double(decay_steps));
  if (t.lr_schedule == "linear") return t.lr - (t.lr - t.min_lr) * progress;
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace feast
