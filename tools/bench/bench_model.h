// The models the benchmarks time: GPT-2 124M, or a Llama of the same depth and width (4
// key/value heads, SwiGLU width 2048, vocabulary 32000, untied head).
#pragma once

#include <string>

#include "model/model_config.h"

namespace feast {

inline ModelConfig bench_model(const std::string& arch) {
  ModelConfig m = ModelConfig::gpt2_124m();
  if (arch == "llama") {
    m.arch = "llama";
    m.n_kv_head = 4;
    m.intermediate_size = 2048;
    m.vocab_size = 32000;
  }
  return m;
}

}  // namespace feast
