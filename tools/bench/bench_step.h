// `trainer bench`: times full training steps (zero grads, forward, backward, AdamW) of GPT-2
// 124M (or a Llama of the same size, --arch llama) on the CPU at fixed shapes and prints
// ms/step, tokens/s and MFU against the measured single-precision GEMM ceiling, in a fixed table.
#pragma once

#include <string>
#include <vector>

namespace feast {

int bench_command(const std::vector<std::string>& args);

}  // namespace feast
