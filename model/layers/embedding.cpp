#include "model/layers/embedding.h"

namespace feast {

TokenEmbedding::TokenEmbedding(const ParamSource& source, bool learned_positions, int C, int vocab_begin)
    : wte_(&source.table->at("wte.weight")),
      wte_view_(source.values.slice(wte_->offset, wte_->numel)),
      C_(C),
      vocab_begin_(vocab_begin),
      Vl_(int(wte_->shape[0])),
      chunks_{{wte_->offset, wte_->offset + wte_->numel}},
      frozen_(source.frozen) {
  if (learned_positions) {
    const LocalParam& wpe = source.table->at("wpe.weight");
    wpe_view_ = source.values.slice(wpe.offset, wpe.numel);
    wpe_range_ = {wpe.offset, wpe.offset + wpe.numel};
  }
}

namespace {

// Calls f(rows, count, positions) for runs of a micro-batch's B*T rows whose positions are
// consecutive: the whole batch at once, or under context parallelism each sequence's two chunks
// (their tokens' places in the whole sequence), each reading its own rows of the position table.
template <typename F>
void for_each_position_run(const LayerContext& ctx, int B, int T, int C, const TensorView& positions, F f) {
  if (!ctx.cp.active() || !positions) return f(size_t(0), B, T, positions);
  const int c = T / 2;
  for (int b = 0; b < B; ++b)
    for (int half = 0; half < 2; ++half)
      f(size_t(b) * size_t(T) + size_t(half) * size_t(c), 1, c,
        positions.slice(size_t(ctx.cp.position(half * c, T)) * size_t(C), size_t(c) * size_t(C)));
}

// Rows [row, row + rows)'s places in their documents under document masks; empty otherwise.
TensorView document_positions(const LayerContext& ctx, size_t row, size_t rows) {
  return ctx.positions ? ctx.positions.slice(row, rows) : TensorView{};
}

}  // namespace

void TokenEmbedding::forward(const LayerContext& ctx, const TensorView& out, const TensorView& tokens, int B,
                             int T) const {
  const TensorView wpe = ctx.tp.rank() == 0 ? wpe_view_ : TensorView{};
  const TensorView sum = partial_sums(ctx, out);
  for_each_position_run(ctx, B, T, C_, wpe, [&](size_t row, int b, int t, const TensorView& positions) {
    const size_t rows = size_t(b) * size_t(t);
    ctx.backend.embedding_forward(sum.slice(row * size_t(C_), rows * size_t(C_)), tokens.slice(row, rows), wte_view_,
                                  positions, document_positions(ctx, row, rows), b, t, C_, vocab_begin_,
                                  vocab_begin_ + Vl_);
  });
  sum_partials(ctx, sum, out, B * T, C_);
}

void TokenEmbedding::backward(const LayerContext& ctx, const TensorView& dout_rows, const TensorView& tokens, int B,
                              int T, GradientSink& sink) const {
  if (frozen_) return;
  const TensorView dout = all_rows(ctx, dout_rows, B * T, C_);
  // The positions' gradient is the same on every tp rank (dout is replicated); it is added with
  // the first chunk of token rows. Each chunk takes the tokens in its rows.
  TensorView gwpe;
  if (wpe_view_) gwpe = sink.acquire(wpe_range_.begin, wpe_range_.end);
  for (const FlatRange& c : chunks_) {
    const int r0 = int((c.begin - wte_->offset) / size_t(C_)), r1 = int((c.end - wte_->offset) / size_t(C_));
    const TensorView gwte = sink.acquire(c.begin, c.end);
    for_each_position_run(ctx, B, T, C_, c.begin == wte_->offset ? gwpe : TensorView{},
                          [&](size_t row, int b, int t, const TensorView& positions) {
                            const size_t rows = size_t(b) * size_t(t);
                            ctx.backend.embedding_backward(gwte, positions, dout.slice(row * size_t(C_), rows * size_t(C_)),
                                                           tokens.slice(row, rows), document_positions(ctx, row, rows),
                                                           b, t, C_, vocab_begin_ + r0, vocab_begin_ + r1);
                          });
    sink.release(c.begin, c.end);
  }
  if (wpe_view_) sink.release(wpe_range_.begin, wpe_range_.end);
}

}  // namespace feast
