// Hugging Face's config.json and feast's [model] section, both ways: which keys of a
// GPT2LMHeadModel or LlamaForCausalLM (and Qwen2ForCausalLM, MistralForCausalLM: the same
// decoder with q/k/v biases or without) config mean which [model] key, and the config.json an
// exported model needs so that `transformers` builds the same network. Anything in a config.json
// that feast would compute differently (another activation, biases on o_proj, sliding windows,
// a head size that is not n_embd / n_head) is refused by name rather than imported wrongly.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace feast {

// One [model] key as a config.json determines it.
struct HfConfigValue {
  std::string key;         // feast's key, "model.n_layer"
  std::string toml;        // its value as TOML text: 12, 1e-05, "llama", true
  std::string hf_key;      // where it came from, "num_hidden_layers" (or "model_type")
  // A training setting rather than the network's shape (the MoE load-balancing loss's weight):
  // the folder's value replaces the default, and a value the config sets wins over it.
  bool advisory = false;
};

// The [model] keys `<folder>/config.json` determines, in the order of the key table. Throws
// DataError naming the file and the key when the file is missing or unreadable, its model_type
// or architecture is not one feast implements, or a key asks for something feast does not
// compute (naming the key, its value and what feast supports).
std::vector<HfConfigValue> read_hf_config(const std::string& folder);

// Token ids an exported config.json names (the tokenizer's, when known).
struct HfSpecialTokens {
  std::optional<int> bos_id, eos_id;
};

// The config.json text of `config` as `transformers` reads it: GPT2LMHeadModel or
// LlamaForCausalLM (Qwen2ForCausalLM when it has q/k/v biases; with [model.moe]
// MixtralForCausalLM or Qwen2MoeForCausalLM, moe_family's); `torch_dtype` names the dtype the
// weights are stored in ("float32", "bfloat16", "float16"). Throws ConfigError for a mixture of
// experts neither class can hold.
std::string hf_config_json(const ModelConfig& config, const HfSpecialTokens& tokens, const std::string& torch_dtype);

// The Hugging Face class of a mixture-of-experts model: "qwen2_moe" (q/k/v biases or shared
// experts: Qwen2MoeForCausalLM) or "mixtral" (MixtralForCausalLM); which names its weights have.
std::string moe_family(const ModelConfig& config);
// Throws ConfigError when the family cannot hold `config` (Mixtral: every block MoE, top-k
// renormalised, no shared experts; Qwen2-MoE: q/k/v biases, one gated shared expert).
void check_moe_exportable(const ModelConfig& config);

}  // namespace feast
