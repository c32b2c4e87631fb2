// `trainer bench step` (the default of `trainer bench`): times full training steps (zero grads,
// forward, backward, AdamW) of one model on one device at fixed shapes and prints ms/step,
// tokens/s and MFU against the measured GEMM ceiling, and the bytes the model, its gradients and
// its optimizer state hold (full fine-tuning, or LoRA over a base in any format), in a fixed table.
#pragma once

#include <string>
#include <vector>

#include "model/lora.h"
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
  // LoRA on every product of the family over a frozen base kept as `lora.base` (model/lora.h);
  // rank 0: every weight trains.
  LoraSpec lora;
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
