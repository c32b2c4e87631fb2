// What makes a decoder family: the parts the generic decoder stage is assembled from and the
// parameter table they hold. A family differs only in its parts:
//   part        GPT-2                      Llama
//   positions   learned wpe                rotary (rotate-half, rope_theta, rope_scaling)
//   norm        LayerNorm with bias        RMSNorm
//   attention   fused QKV, biases          fused QKV with n_kv_head key/value heads (GQA),
//                                          biases only with qkv_bias (Qwen2)
//   MLP         GELU (tanh), 4 C, biases   SwiGLU, intermediate_size, no biases
//   head        tied to wte                untied unless tie_embeddings
// Adding a family is adding a row here: a DecoderArch and nothing in the stage.
#pragma once

#include "model/model_config.h"
#include "model/parameters.h"

namespace feast {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };

struct DecoderArch {
  bool learned_positions = true;  // GPT-2's wpe; otherwise rotary embeddings
  NormKind norm = NormKind::kLayerNorm;
  MlpKind mlp = MlpKind::kGelu;
  bool qkv_bias = true;     // biases on the fused q/k/v projection
  bool linear_bias = true;  // biases on the attention output projection and the MLP
  bool tied = true;         // the LM head is the token embedding
};

// Throws ConfigError for an unknown model.arch.
DecoderArch decoder_arch(const ModelConfig& config);

// The family's table, in the order of the flat buffer: wte (Vp, C); lm_head (tied to wte or its
// own (Vp, C)); wpe (maxT, C) with learned positions; per layer ln_1, attn.qkv ((NH + 2 NKV) hs,
// C) in blocks q, k, v, attn.proj (C, NH hs), ln_2, mlp.fc (blocks gate and up for SwiGLU),
// mlp.proj (an MoE block instead: mlp.router, then per expert mlp.experts.E.fc and .proj, then
// mlp.shared.fc and .proj and mlp.shared_gate when it has them); then ln_f. Residual projections are initialised with init_std / sqrt(2 n_layer).
ParamTable decoder_param_table(const ModelConfig& config);

}  // namespace feast
