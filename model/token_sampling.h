// Choosing the next token from a row of logits for `trainer generate`: greedy, or a draw at a
// temperature restricted to the top-k tokens and the top-p nucleus. Draws come from the
// project's counter-based RNG (core/rng.h) keyed by (seed, step), so a generation is a function
// of the model, the prompt and the options alone.
#pragma once

#include <cstdint>
#include <span>

namespace feast {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax)
  int top_k = 0;             // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // keep the smallest set whose probability reaches top_p; 1 = all
  uint64_t seed = 0;
};

// Throws ConfigError naming the flag (--temperature, --top-k, --top-p) when an option is out of
// range: temperature >= 0, top_k >= 0, 0 < top_p <= 1.
void validate_sampling_options(const SamplingOptions& options);

// The token drawn for generation step `step` from logits (V): temperature 0 is the argmax (ties
// go to the lowest id); otherwise softmax(logits / temperature), cut to the top_k most likely
// (ties broken by the lower id), then to the smallest prefix of those whose cumulative
// probability is >= top_p, renormalised, and drawn with uniform number (seed, step). Validates
// the options; throws Error for empty logits or a NaN.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, uint64_t step);

}  // namespace feast
