// The shape of a decoder-only model of one family, GPT-2 or Llama: what every layer, the
// parameter table and the activation buffers are sized from. Filled from the [model] section of
// the config; docs/config.md says what each key means for each family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace feast {

// Hugging Face's rope_scaling: how the rotary frequencies are stretched for long contexts.
struct RopeScaling {
  std::string rope_type = "default";  // "default" (none), "linear" or "llama3"
  double factor = 8.0;                 // "linear" and "llama3": the context extension factor
  double low_freq_factor = 1.0;        // "llama3"
  double high_freq_factor = 4.0;       // "llama3"
  int original_max_position_embeddings = 8192;  // "llama3": the context the model was trained on
};

// [model.moe]: a mixture of experts in place of the MLP of some blocks (model/layers/moe.h), as
// Mixtral and Qwen2-MoE have. Each token's router picks top_k of n_experts SwiGLU experts; their
// outputs are summed weighted by the router's probabilities.
struct MoeConfig {
  int n_experts = 0;          // experts per MoE block; 0 = no MoE (every block dense)
  int top_k = 2;              // experts each token is sent to
  int intermediate_size = 0;  // each expert's width; 0 = model.intermediate_size
  int every = 1;              // block l (from 0) is MoE when (l + 1) % every == 0 (Qwen2-MoE's decoder_sparse_step)
  // Experts every token passes through besides the routed ones, as one MLP of
  // shared_intermediate_size (0 = n_shared_experts * intermediate_size).
  int n_shared_experts = 0;
  int shared_intermediate_size = 0;
  bool shared_expert_gate = false;  // the shared experts' output scaled by sigmoid(x . g) (Qwen2-MoE)
  bool norm_topk_prob = true;       // the top-k probabilities renormalised to sum to 1 (Mixtral)
  double aux_loss_coef = 0.0;       // the load-balancing loss's weight (transformers' router_aux_loss_coef)
  double z_loss_coef = 0.0;         // the router z-loss's weight (ST-MoE)
  // Tokens an expert takes per micro-batch: capacity_factor * N * top_k / n_experts (rounded up);
  // tokens past it skip the expert. 0 = dropless.
  double capacity_factor = 0.0;

  bool enabled() const { return n_experts > 0; }
  bool is_moe_layer(int layer) const { return enabled() && (layer + 1) % every == 0; }
};

struct ModelConfig {
  std::string arch = "gpt2";  // "gpt2" or "llama"
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int vocab_size = 256;    // real vocabulary (token ids are < vocab_size)
  int max_seq_len = 256;   // the longest sequence (GPT-2: rows of the learned position embedding)
  double init_std = 0.02;  // std of the normal initialisation of weight matrices
  int n_kv_head = 0;          // key/value heads for grouped-query attention; 0 = n_head (Llama)
  int intermediate_size = 0;  // MLP width; 0 = the family's default (mlp_width())
  double norm_eps = 1e-5;     // epsilon of LayerNorm (GPT-2) or RMSNorm (Llama)
  double rope_theta = 10000.0;  // rotary base frequency (Llama)
  RopeScaling rope_scaling;     // (Llama)
  MoeConfig moe;                // (Llama)
  bool qkv_bias = false;        // biases on q, k and v (Llama family, as Qwen2 has)
  std::optional<bool> tie_embeddings;  // LM head shares the token embedding; unset = family default
  // A Hugging Face model folder whose config.json sets the keys above and whose safetensors
  // weights initialise a fresh run (interop/hf/hf_weights.h); empty = random initialisation.
  std::string init_from;
  // The tokenizer's folder (data/tokenizer/tokenizer.h) for text given to the trainer (generate's
  // prompts) and for export; empty = model.init_from's, or the byte tokenizer.
  std::string tokenizer;

  bool is_llama() const { return arch == "llama"; }
  // The vocabulary padded to a multiple of 128 (so that tensor-parallel slices stay aligned);
  // padded logits are excluded from softmax and loss.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_dim() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // GPT-2: 4 n_embd. Llama: Meta's rule, 2/3 of 4 n_embd rounded up to a multiple of 256.
  int mlp_width() const {
    if (intermediate_size > 0) return intermediate_size;
    if (!is_llama()) return 4 * n_embd;
    return (8 * n_embd / 3 + 255) / 256 * 256;
  }
  // Each expert's width, and the shared experts' (0: none).
  int expert_width() const { return moe.intermediate_size > 0 ? moe.intermediate_size : mlp_width(); }
  int shared_expert_width() const {
    if (moe.n_shared_experts == 0) return 0;
    return moe.shared_intermediate_size > 0 ? moe.shared_intermediate_size : moe.n_shared_experts * expert_width();
  }
  // MoE blocks among layers [0, n_layer).
  int moe_layers() const {
    int n = 0;
    for (int l = 0; l < n_layer; ++l) n += moe.is_moe_layer(l) ? 1 : 0;
    return n;
  }
  // GPT-2 ties its head to the token embedding by default, Llama does not.
  bool tied() const { return tie_embeddings.value_or(!is_llama()); }

  // GPT-2 124M (12 layers, 12 heads, 768 channels, vocabulary 50257, context 1024): the model
  // the benchmarks measure.
  static ModelConfig gpt2_124m() {
    ModelConfig c;
    c.n_layer = 12;
    c.n_head = 12;
    c.n_embd = 768;
    c.vocab_size = 50257;
    c.max_seq_len = 1024;
    return c;
  }
};

}  // namespace feast
