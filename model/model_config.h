// The shape of a GPT-2-style model: what every layer, the parameter table and the activation
// buffers are sized from. Filled from the [model] section of the config.
#pragma once

#include <cstdint>
#include <string>

namespace feast {

struct ModelConfig {
  std::string arch = "gpt2";  // only "gpt2" for now; Llama comes with a later issue
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int vocab_size = 256;    // real vocabulary (token ids are < vocab_size)
  int max_seq_len = 256;   // rows of the learned position embedding
  double init_std = 0.02;  // std of the normal initialisation of weight matrices

  // The vocabulary padded to a multiple of 128 (so that tensor-parallel slices stay aligned);
  // padded logits are excluded from softmax and loss.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_dim() const { return n_embd / n_head; }
};

}  // namespace feast
