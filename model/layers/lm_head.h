// The vocab-parallel LM head and its cross-entropy on the last stage: logits (N, Vl) = x @ W^T
// for this rank's vocabulary rows of W (the token embedding when tied, its own lm_head
// otherwise), then a softmax cross-entropy that never gathers the logits: the row maxima, then
// the sums of exponentials and target logits, are reduced over the tensor-parallel group, and
// padded vocabulary columns take no part. In a training forward the logits turn into their
// gradient in place, so the backward is two matrix products.
// Legend: N rows, C channels, Vl this rank's vocabulary rows, V the real vocabulary.
#pragma once

#include <vector>

#include "model/layers/activation_memory.h"
#include "model/layers/layer_context.h"

namespace feast {

class LmHead {
 public:
  // frozen (LoRA's base): the backward computes the input gradient only.
  LmHead(const LocalParam& weight, const TensorView& params, bool frozen, int C, int vocab_begin, int vocab_size,
         size_t rows, ActivationMemory& memory);

  // Forward of x (N, C) with targets (N); returns the mean token loss. With loss_scale != 0 the
  // logits become d(loss_scale * sum of losses) / d logits.
  float forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& targets, int N,
                float loss_scale);
  // Adds the weight's gradient (chunk by chunk) and leaves dx (N, C), this rank's partial input
  // gradient, for the caller to sum over the group.
  void backward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& dx, int N,
                GradientSink& sink) const;
  // Its halves (a split backward: the logits' gradient stays in the slot until the second).
  void backward_input(const LayerContext& ctx, int slot, const TensorView& dx, int N) const;
  void backward_weight(const LayerContext& ctx, int slot, const TensorView& x, int N, GradientSink& sink) const;

  const LocalParam& weight() const { return *w_; }
  bool frozen() const { return frozen_; }
  void set_chunks(std::vector<FlatRange> chunks) { chunks_ = std::move(chunks); }
  const std::vector<FlatRange>& chunks() const { return chunks_; }
  const TensorView& logits(int slot) const { return logits_[size_t(slot)]; }

 private:
  const LocalParam* w_;
  TensorView w_view_;
  int C_, vocab_begin_, V_, Vl_;
  std::vector<FlatRange> chunks_;
  std::vector<TensorView> logits_, losses_;  // per slot: (N, Vl), (N)
  bool frozen_;
};

}  // namespace feast
