// The token embedding on the first stage, vocab-parallel (each tensor-parallel rank holds rows
// [vocab_begin, vocab_begin + Vl) of the padded vocabulary, embeds its own tokens and zeros
// for the rest; the group's sum is the embedding), plus GPT-2's learned positions, which tp
// rank 0 adds before the sum. Its gradient is acquired in chunks of whole rows. Under sequence
// parallelism the sum is a reduce-scatter that leaves each rank its N/tp rows, and the
// backward gathers their gradient from every rank.
// Legend: B batch, T time, C channels, Vl this rank's vocabulary rows.
#pragma once

#include <vector>

#include "model/layers/layer_context.h"

namespace feast {

class TokenEmbedding {
 public:
  // A frozen embedding (LoRA's base) has no backward.
  TokenEmbedding(const ParamSource& params, bool learned_positions, int C, int vocab_begin);

  // out (B*T, C) = the embedding of tokens (B, T), summed over the tensor-parallel group (this
  // rank's rows of it under sequence parallelism).
  void forward(const LayerContext& ctx, const TensorView& out, const TensorView& tokens, int B, int T) const;
  // Adds the gradient of dout (B*T, C; this rank's rows under sequence parallelism) to the token
  // rows (chunk by chunk) and the positions.
  void backward(const LayerContext& ctx, const TensorView& dout, const TensorView& tokens, int B, int T,
                GradientSink& sink) const;

  const LocalParam& token_table() const { return *wte_; }
  bool frozen() const { return frozen_; }
  void set_chunks(std::vector<FlatRange> chunks) { chunks_ = std::move(chunks); }
  const std::vector<FlatRange>& chunks() const { return chunks_; }
  FlatRange position_range() const { return wpe_range_; }  // empty without learned positions

 private:
  const LocalParam* wte_;
  TensorView wte_view_, wpe_view_;
  FlatRange wpe_range_;
  int C_, vocab_begin_, Vl_;
  std::vector<FlatRange> chunks_;  // of wte's range, whole rows each
  bool frozen_;
};

}  // namespace feast
