// `trainer bench step` (the default of `trainer bench`): times full training steps (zero grads,
// forward, backward, AdamW) of one model on one device at fixed shapes and prints ms/step,
// tokens/s and MFU against the measured GEMM ceiling, in a fixed table.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"

namespace feast {

struct BatchShape {
  int B, T;  // sequences, tokens per sequence
};

struct StepBenchOptions {
  std::vector<BatchShape> shapes = {{4, 64}, {8, 256}};
  int warmup = 2, steps = 7;
  ModelConfig model = ModelConfig::gpt2_124m();  // n_embd divisible by n_head, n_kv_head dividing n_head
  std::string device = "cpu", dtype = "auto";
};

// Exits non-zero (returns 1) if a loss is not finite or the first loss is not near ln(vocab).
int run_step_bench(const StepBenchOptions& options);

// The median seconds of timed training steps at options' one shape, printing nothing (trainer
// plan --calibrate): options.warmup untimed steps, then at least one timed and more, up to
// options.steps, while their total stays under budget_s. Throws feast::Error if a loss is wrong.
struct StepTiming {
  double median_s = 0;
  int steps = 0;  // timed
};
StepTiming measure_step_seconds(const StepBenchOptions& options, double budget_s);

}  // namespace feast
