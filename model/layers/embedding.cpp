#include "model/layers/embedding.h"

namespace feast {

TokenEmbedding::TokenEmbedding(const LocalTable& table, const TensorView& params, bool learned_positions, int C,
                               int vocab_begin)
    : wte_(&table.at("wte.weight")),
      wte_view_(params.slice(wte_->offset, wte_->numel)),
      C_(C),
      vocab_begin_(vocab_begin),
      Vl_(int(wte_->shape[0])),
      chunks_{{wte_->offset, wte_->offset + wte_->numel}} {
  if (learned_positions) {
    const LocalParam& wpe = table.at("wpe.weight");
    wpe_view_ = params.slice(wpe.offset, wpe.numel);
    wpe_range_ = {wpe.offset, wpe.offset + wpe.numel};
  }
}

void TokenEmbedding::forward(const LayerContext& ctx, const TensorView& out, const TensorView& tokens, int B,
                             int T) const {
  const TensorView wpe = ctx.tp.rank() == 0 ? wpe_view_ : TensorView{};
  const TensorView sum = partial_sums(ctx, out);
  ctx.backend.embedding_forward(sum, tokens, wte_view_, wpe, B, T, C_, vocab_begin_, vocab_begin_ + Vl_);
  sum_partials(ctx, sum, out, B * T, C_);
}

void TokenEmbedding::backward(const LayerContext& ctx, const TensorView& dout_rows, const TensorView& tokens, int B,
                              int T, GradientSink& sink) const {
  const TensorView dout = all_rows(ctx, dout_rows, B * T, C_);
  // The positions' gradient is the same on every tp rank (dout is replicated); it is added with
  // the first chunk of token rows. Each chunk takes the tokens in its rows.
  TensorView gwpe;
  if (wpe_view_) gwpe = sink.acquire(wpe_range_.begin, wpe_range_.end);
  for (const FlatRange& c : chunks_) {
    const int r0 = int((c.begin - wte_->offset) / size_t(C_)), r1 = int((c.end - wte_->offset) / size_t(C_));
    ctx.backend.embedding_backward(sink.acquire(c.begin, c.end), c.begin == wte_->offset ? gwpe : TensorView{}, dout,
                                   tokens, B, T, C_, vocab_begin_ + r0, vocab_begin_ + r1);
    sink.release(c.begin, c.end);
  }
  if (wpe_view_) sink.release(wpe_range_.begin, wpe_range_.end);
}

}  // namespace feast
