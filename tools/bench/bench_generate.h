// `trainer bench generate`: how fast `trainer generate` decodes: the prefill of a prompt and
// greedy tokens one at a time with the key/value cache, for GPT-2 124M (or a Llama of the same
// shape), random weights.
#pragma once

#include <string>

namespace feast {

struct GenerateBenchOptions {
  std::string arch = "gpt2";  // "gpt2" or "llama"
  int prompt_tokens = 16, new_tokens = 64;
};

int run_generate_bench(const GenerateBenchOptions& options);

}  // namespace feast
