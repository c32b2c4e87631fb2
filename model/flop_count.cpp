#include "model/flop_count.h"

#include "model/architecture.h"

namespace feast {

double matmul_parameters(const ModelConfig& config) {
  const double total = double(decoder_param_table(config).total_numel());
  const double padding = double(config.padded_vocab() - config.vocab_size) * config.n_embd;
  const double embedding = double(config.vocab_size) * config.n_embd;
  return config.tied() ? total - padding : total - 2 * padding - embedding;
}

double active_matmul_parameters(const ModelConfig& config) {
  const double idle = double(config.moe.n_experts - config.moe.top_k) * 3.0 * config.expert_width() * config.n_embd;
  return matmul_parameters(config) - (config.moe.enabled() ? config.moe_layers() * idle : 0.0);
}

double training_flops_per_token(const ModelConfig& config, int seq_len) {
  return 6.0 * active_matmul_parameters(config) + 6.0 * config.n_layer * double(seq_len) * config.n_embd;
}

double training_flops_per_token(const ModelConfig& config, int seq_len, const LoraSpec& lora) {
  if (!lora.enabled()) return training_flops_per_token(config, seq_len);
  const double adapters = double(lora_param_table(config, lora).total_numel());
  return 4.0 * active_matmul_parameters(config) + 6.0 * adapters + 6.0 * config.n_layer * double(seq_len) * config.n_embd;
}

}  // namespace feast
