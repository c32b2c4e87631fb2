// Inference with a key/value cache for `trainer generate`: a single-process, float32 CPU decoder
// of either family that keeps the keys and values of every past position, so that each new token
// costs one pass over the weights instead of a recompute of the whole context. It computes with
// the training forward's CPU ops and formulas (model/cpu/, backend/scalar_math.h, model/rope.h), so
// its logits match DecoderStage's on the CPU backend to float32 rounding.
// Legend: n new tokens, P positions in the cache, C channels, NH query heads, NKV key/value heads,
// hs head size, W = (NH + 2 NKV) hs a QKV row, I the MLP width, V vocabulary (unpadded).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/model_config.h"
#include "model/parameters.h"

namespace feast {

class KvCacheDecoder {
 public:
  // Fills the full logical tensor `logical_name` of decoder_param_table(config) (shape as listed
  // there, padded vocabulary rows included, row-major) into `out`. Asked once per tensor; a tied
  // tensor (GPT-2's lm_head.weight) is not asked for, it reads its target's values.
  using WeightSource =
      std::function<void(const std::string& logical_name, std::span<const int64_t> shape, float* out)>;

  // One process holds the whole model and a cache of max_seq_len positions per layer
  // (2 L max_seq_len NKV hs floats): generation is for models that fit one process's memory, not
  // for the pipeline- or tensor-parallel layouts training may use. Throws ConfigError for an
  // unknown family or rope type, Error when n_head is not a multiple of n_kv_head or a rotary
  // head size is odd.
  // `max_positions` (0 = max_seq_len) bounds the cache: a generation that needs 100 positions of
  // a model with a 128k context should not hold 128k positions of keys and values per layer.
  KvCacheDecoder(const ModelConfig& config, const WeightSource& weights, int max_positions = 0);

  // Empties the cache: the next forward starts at position 0.
  void reset() { pos_ = 0; }

  // Appends `tokens` at the next positions (a whole prompt at once is the prefill, then one token
  // at a time) and returns the logits of the last one: vocab_size entries, padding excluded.
  // Throws Error when tokens is empty, a token is outside [0, vocab_size), or the context would
  // exceed max_seq_len; the cache is unchanged then.
  std::vector<float> forward(std::span<const int32_t> tokens);

  // Positions in the cache (the next token's position).
  int position() const { return pos_; }
  const ModelConfig& config() const { return config_; }

 private:
  // Pointers into params_, resolved once; a bias or norm bias the family lacks is null.
  struct Norm {
    const float* weight = nullptr;  // (C)
    const float* bias = nullptr;    // (C), LayerNorm only
  };
  struct Layer {
    Norm ln_1, ln_2;
    const float *qkv_w = nullptr, *qkv_b = nullptr;    // (W, C), (W)
    const float *proj_w = nullptr, *proj_b = nullptr;  // (C, NH hs), (C)
    const float *fc_w = nullptr, *fc_b = nullptr;      // (I or 2I, C), (I)
    const float *out_w = nullptr, *out_b = nullptr;    // mlp.proj: (C, I), (C)
    // A mixture-of-experts block's (fc_w null): the router (E, C), each expert's fc (2 Ie, C) and
    // proj (C, Ie), the shared experts' fc and proj and their gate (1, C), if any.
    const float* router = nullptr;
    std::vector<const float*> expert_fc, expert_proj;
    const float *shared_fc = nullptr, *shared_proj = nullptr, *shared_gate = nullptr;
  };
  // out (n, C) = layer L's mixture of experts on inp (n, C), computed token by token.
  void moe(float* out, const float* inp, const Layer& L, int n);

  // out (n, OC) = inp (n, K) weight^T + bias: one GEMM for a prefill, a GEMV for one token.
  void linear(float* out, const float* inp, const float* w, const float* b, int n, int K, int OC) const;
  void norm(float* out, const float* inp, const Norm& w, int n);
  // y (n, NH hs) from the queries in qkv (n, W) over the cache of layer l (positions
  // [0, pos_ + n), the new keys and values already appended).
  void attend(float* y, const float* qkv, int layer, int n);

  ModelConfig config_;
  DecoderArch arch_;
  ParamTable table_;
  std::vector<float> params_;  // the logical flat buffer (table order; ties share their target)
  const float *wte_ = nullptr, *wpe_ = nullptr, *lm_head_ = nullptr;  // (Vp, C), (maxT, C), (Vp, C)
  std::vector<Layer> layers_;
  Norm ln_f_;
  std::vector<float> cos_, sin_;  // rotary tables (maxT, hs/2); empty with learned positions
  std::vector<float> k_cache_, v_cache_;  // (L, maxT, NKV hs) each
  int pos_ = 0;
  int capacity_ = 0;  // positions the cache holds: max_positions, at most max_seq_len
  // Activations of one forward, sized for n new tokens on use.
  std::vector<float> x_, ln_, qkv_, y_, tmp_, fc_, act_, stats_, scores_;
};

}  // namespace feast
