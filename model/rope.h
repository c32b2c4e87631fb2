// The frequencies of rotary position embeddings, as Hugging Face computes them for Llama:
// inv_freq[i] = 1 / theta^(2i / hs), optionally rescaled for long contexts ("linear": divided by
// the factor; "llama3": Llama 3.1's smooth blend of low and high frequencies), and the cos/sin
// tables the rope op reads. Everything is float32 like Hugging Face's and Meta's code, so an
// imported model sees exactly the angles it was trained with.
#pragma once

#include <vector>

#include "model/model_config.h"

namespace feast {

// hs/2 inverse frequencies for head size hs (even). Throws ConfigError for an unknown rope_type.
std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

// cos and sin (max_seq_len, hs/2): row t holds cos and sin of t * inv_freq[i].
void rope_tables(const ModelConfig& config, std::vector<float>& cos, std::vector<float>& sin);

}  // namespace feast
