// The FLOPs of a training step, counted as llm.c and the MFU literature count them (Kaplan et
// al.; PaLM's appendix B): 6 N per token for the matrix products of forward and backward (2 N
// forward, 4 N backward), plus 6 L T C per token for attention's scores and weighted sums over
// a context of T. MFU divides this model count, not the FLOPs a kernel happens to execute, by
// the time and the device peak, so recomputation or padding never raises it.
#pragma once

#include "model/lora.h"
#include "model/model_config.h"

namespace feast {

// N: the model's parameters without vocabulary padding, an untied token embedding excluded
// (a lookup, not a product; a tied one counts once, as the head). The same N `trainer bench`
// reports.
double matmul_parameters(const ModelConfig& config);

// Of those, the ones a token's products use: a mixture of experts' token passes through top_k of
// its n_experts experts (and the router and shared experts), so the others' are left out.
double active_matmul_parameters(const ModelConfig& config);

// 6 N + 6 L T C: training FLOPs per token at sequence length T, N the active parameters.
double training_flops_per_token(const ModelConfig& config, int seq_len);
// Under LoRA (lora.enabled()): the frozen model's products run forward and for the input
// gradient only, 4 N, and the adapters' (A x, then B of it) all three ways, 6 per adapter
// parameter: 4 N + 6 N_lora + 6 L T C. Without LoRA, the above.
double training_flops_per_token(const ModelConfig& config, int seq_len, const LoraSpec& lora);

}  // namespace feast
