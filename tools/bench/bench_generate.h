// `trainer bench --generate`: how fast `trainer generate` decodes: the prefill of a prompt and
// greedy tokens one at a time with the key/value cache, for GPT-2 124M (or Llama of the same
// shape with --arch llama), random weights.
#pragma once

#include <string>
#include <vector>

namespace feast {

int bench_generate_command(const std::vector<std::string>& args);

}  // namespace feast
