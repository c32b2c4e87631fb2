#include "model/layers/lm_head.h"

namespace feast {

LmHead::LmHead(const LocalParam& weight, const TensorView& params, bool frozen, int C, int vocab_begin,
               int vocab_size, size_t rows, ActivationMemory& memory)
    : w_(&weight),
      w_view_(params.slice(weight.offset, weight.numel)),
      C_(C),
      vocab_begin_(vocab_begin),
      V_(vocab_size),
      Vl_(int(weight.shape[0])),
      chunks_{{weight.offset, weight.offset + weight.numel}},
      logits_(memory.take(true, memory.dtype(), rows * size_t(Vl_))),
      losses_(memory.take(true, DType::kFloat32, rows)),
      frozen_(frozen) {}

float LmHead::forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& targets, int N,
                      float loss_scale) {
  Backend& be = ctx.backend;
  const TensorView logits = logits_[size_t(slot)], losses = losses_[size_t(slot)];
  be.matmul_forward(logits, x, w_view_, TensorView{}, N, C_, Vl_);
  const StageScratch& sc = ctx.scratch;
  const TensorView sum_exp = sc.ce_partials.first(size_t(N)), target_logit = sc.ce_partials.slice(size_t(N), size_t(N));
  be.cross_entropy_row_max(sc.ce_max, logits, N, Vl_, vocab_begin_, V_);
  ctx.tp.allreduce(sc.ce_max.first(size_t(N)), ReduceOp::kMax);
  be.cross_entropy_partials(sum_exp, target_logit, logits, sc.ce_max, targets, N, Vl_, vocab_begin_, V_,
                            loss_scale != 0.0f);
  ctx.tp.allreduce(sc.ce_partials.first(2 * size_t(N)), ReduceOp::kSum);  // sum_exp and target_logit together
  be.cross_entropy_finish(logits, losses, sc.ce_max, sum_exp, target_logit, targets, N, Vl_, vocab_begin_, V_,
                          loss_scale);
  return static_cast<float>(be.sum(losses.first(size_t(N))) / N);
}

void LmHead::backward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& dx, int N,
                      GradientSink& sink) const {
  if (!frozen_) backward_weight(ctx, slot, x, N, sink);
  backward_input(ctx, slot, dx, N);
}

void LmHead::backward_input(const LayerContext& ctx, int slot, const TensorView& dx, int N) const {
  ctx.backend.matmul_backward_input(dx, logits_[size_t(slot)], w_view_, N, C_, Vl_);
}

void LmHead::backward_weight(const LayerContext& ctx, int slot, const TensorView& x, int N,
                             GradientSink& sink) const {
  const TensorView dlogits = logits_[size_t(slot)];
  for (const FlatRange& c : chunks_) {
    const int r0 = int((c.begin - w_->offset) / size_t(C_)), r1 = int((c.end - w_->offset) / size_t(C_));
    ctx.backend.matmul_backward_weight_rows(sink.acquire(c.begin, c.end), dlogits, x, N, C_, Vl_, r0, r1);
    sink.release(c.begin, c.end);
  }
}

}  // namespace feast
