#include "model/layers/norm.h"

#include "core/error.h"

namespace feast {

Norm::Norm(NormKind kind, float eps, const ParamSource& params, const std::string& name, int C, size_t rows,
           ActivationMemory& memory, bool saved)
    : kind_(kind),
      eps_(eps),
      C_(C),
      params_(weight_and_bias(params, name, kind == NormKind::kLayerNorm)),
      out_(memory.take(saved, memory.dtype(), rows * size_t(C))),
      rstd_(memory.take(saved, DType::kFloat32, rows)) {
  if (kind == NormKind::kLayerNorm) mean_ = memory.take(saved, DType::kFloat32, rows);
  dout_ = memory.take_output_grads(memory.dtype(), rows * size_t(C));
}

void Norm::run(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& gw, const TensorView& gb,
               const TensorView& dout, const TensorView& x, const TensorView& w, int N) const {
  const size_t s = size_t(slot);
  if (kind_ == NormKind::kLayerNorm) {
    ctx.backend.layernorm_backward(dx, gw, gb, dout, x, w, mean_[s], rstd_[s], N, C_);
  } else {
    ctx.backend.rmsnorm_backward(dx, gw, dout, x, w, rstd_[s], N, C_);
  }
}

void Norm::forward(const LayerContext& ctx, int slot, const TensorView& x, int N) {
  const size_t s = size_t(slot);
  if (kind_ == NormKind::kLayerNorm) {
    ctx.backend.layernorm_forward(out_[s], mean_[s], rstd_[s], x, params_.w, params_.b, N, C_, eps_);
  } else {
    ctx.backend.rmsnorm_forward(out_[s], rstd_[s], x, params_.w, N, C_, eps_);
  }
}

void Norm::backward(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                    const TensorView& x, int N, GradientSink& sink) {
  if (params_.frozen)  // LoRA's base: no parameter gradients
    input_gradient(ctx, slot, dx, dout, x, N);
  else
    add_parameter_grads(ctx, slot, dx, dout, x, params_.w, N, sink);
}

void Norm::input_gradient(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                          const TensorView& x, int N) const {
  // The backend computes dx with the parameter gradients; those go to the scratch, unused.
  const TensorView unused = ctx.scratch.norm_grads.first(params_.range.size());
  ctx.backend.zero(unused);
  run(ctx, slot, dx, unused.first(size_t(C_)), params_.bias ? unused.slice(size_t(C_), size_t(C_)) : TensorView{}, dout,
      x, params_.w, N);
}

void Norm::backward_input(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                          const TensorView& x, int N) {
  const size_t NC = size_t(N) * size_t(C_);
  ctx.backend.copy(dout_[size_t(slot)].first(NC), dout.first(NC));
  input_gradient(ctx, slot, dx, dout, x, N);
}

void Norm::backward_weight(const LayerContext& ctx, int slot, const TensorView& x, int N, GradientSink& sink) {
  // And the other way round: the input gradient goes to tmp (free between passes), unused, and
  // is computed with the stand-in weight, so that this pass reads no parameter.
  const TensorView unused = ctx.scratch.tmp.first(size_t(N) * size_t(C_));
  ctx.backend.zero(unused);
  add_parameter_grads(ctx, slot, unused, dout_[size_t(slot)], x, ctx.scratch.norm_weight_stand_in, N, sink);
}

void Norm::add_parameter_grads(const LayerContext& ctx, int slot, const TensorView& dx, const TensorView& dout,
                               const TensorView& x, const TensorView& w, int N, GradientSink& sink) {
  AcquiredGrads g(sink, params_);
  // Under sequence parallelism this rank saw only its rows: its parameter gradients are partial
  // sums, which go through the scratch to be summed over the group before they are added.
  const bool sp = ctx.tp.sequence_parallel();
  const size_t n = params_.range.size();
  TensorView gw = g.w(), gb = g.b();
  if (sp) {
    const TensorView own = ctx.scratch.norm_grads.first(n);
    FEAST_CHECK(g.w().dtype == own.dtype, "a norm's gradients are float32");
    ctx.backend.zero(own);
    gw = own.first(size_t(C_));
    gb = gb ? own.slice(size_t(C_), size_t(C_)) : TensorView{};
  }
  run(ctx, slot, dx, gw, gb, dout, x, w, N);
  if (sp) {
    const TensorView own = ctx.scratch.norm_grads.first(n);
    ctx.tp.allreduce(own, ReduceOp::kSum);
    ctx.backend.add(g.all(), g.all(), own, n);
  }
  g.release();
}

}  // namespace feast
