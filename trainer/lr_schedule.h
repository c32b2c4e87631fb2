// The learning rate as a pure function of the step: linear warm-up, then cosine, linear or
// constant decay to a floor. A resumed run computes the same rate for the same step.
#pragma once

#include <cstdint>

#include "trainer/config.h"

namespace feast {

// Learning rate of 0-based step `step` of training.steps.
double learning_rate(const TrainingConfig& training, int64_t step);

}  // namespace feast
