// The training loop of one rank: builds the model, optimizer and samplers from a validated
// config, checks the data before allocating the model, then runs training.steps optimizer
// steps with gradient accumulation over micro-batches, periodic evaluation, progress lines and
// metrics.jsonl in the run directory.
#pragma once

#include <cstdint>
#include <optional>

#include "trainer/config.h"

namespace feast {

struct TrainSummary {
  int64_t steps = 0;
  double final_loss = 0;
  std::optional<double> final_val_loss;
  double tokens_per_s = 0;  // over the whole run, evaluation excluded
};

TrainSummary train(const Config& config);

}  // namespace feast
