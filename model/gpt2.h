// GPT-2 on the CPU backend: token + position embedding, pre-LN blocks (LayerNorm, causal
// multi-head attention, GELU-tanh MLP), final LayerNorm, LM head tied to the token embedding,
// cross-entropy over the padded vocabulary. Owns the flat parameter and gradient buffers and
// every activation buffer, sized once for the largest micro-batch: the step never allocates.
// Legend: B batch, T time, C channels, NH heads, L layers, Vp padded vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/model_config.h"
#include "model/parameters.h"

namespace feast {

class GPT2 {
 public:
  // Activations are sized for micro-batches of up to max_batch sequences of max_seq tokens.
  GPT2(const ModelConfig& config, int max_batch, int max_seq);

  const ModelConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  float* params() { return params_.data(); }
  float* grads() { return grads_.data(); }
  size_t num_params() const { return params_.size(); }
  size_t activation_bytes() const { return acts_.size() * sizeof(float); }

  // Forward only (evaluation): the mean loss over the B*T tokens. Afterwards logits() holds
  // the (B*T, Vp) logits.
  float evaluate(const int32_t* inputs, const int32_t* targets, int B, int T);

  // Forward and backward of one micro-batch. Gradients accumulate (+=) into grads() as the
  // gradient of loss_scale * (sum of this micro-batch's token losses), so a step over several
  // micro-batches passes loss_scale = 1 / (tokens in the whole batch). Returns the
  // micro-batch's mean token loss.
  float forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                         float loss_scale);

  const float* logits() const { return logits_; }
  void zero_grads() { grads_.zero(); }

 private:
  struct LayerParams {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  };
  struct LayerActs {
    float* ln1;       // (B, T, C)
    float* ln1_mean;  // (B, T)
    float* ln1_rstd;  // (B, T)
    float* qkv;       // (B, T, 3C)
    float* atty;      // (B, T, C) attention output before the projection
    float* att;       // (B, NH, T, T) softmax probabilities
    float* res2;      // (B, T, C) residual stream after attention
    float* ln2;       // (B, T, C)
    float* ln2_mean;  // (B, T)
    float* ln2_rstd;  // (B, T)
    float* fch;       // (B, T, 4C) MLP pre-activation
    float* fch_gelu;  // (B, T, 4C)
    float* res3;      // (B, T, C) residual stream after the MLP (the block's output)
  };

  LayerParams layer_params(float* base, int layer) const;
  void forward(const int32_t* inputs, int B, int T);

  ModelConfig config_;
  ParamTable table_;
  int max_batch_, max_seq_;
  Buffer<float> params_, grads_;
  Buffer<float> acts_;     // every forward activation, carved into the views below
  Buffer<float> scratch_;  // backward temporaries
  float* encoded_;         // (B, T, C)
  std::vector<LayerActs> layers_;
  std::vector<LayerParams> layer_w_, layer_g_;  // per-layer views into params_ and grads_
  float *lnf_, *lnf_mean_, *lnf_rstd_;  // (B, T, C), (B, T), (B, T)
  float* logits_;                       // (B, T, Vp); the backward turns it into dlogits
  float* losses_;                       // (B, T)
  float *tmp_, *dres_, *dln_, *dbig_, *dqkv_, *dy_, *att_scratch_;
};

}  // namespace feast
