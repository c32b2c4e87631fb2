#include "model/layers/norm.h"

#include "core/error.h"

namespace feast {

Norm::Norm(NormKind kind, float eps, const LocalTable& table, const TensorView& params, const std::string& name,
           int C, size_t rows, ActivationMemory& memory, bool saved)
    : kind_(kind),
      eps_(eps),
      C_(C),
      params_(weight_and_bias(table, params, name, kind == NormKind::kLayerNorm)),
      out_(memory.take(saved, memory.dtype(), rows * size_t(C))),
      rstd_(memory.take(saved, DType::kFloat32, rows)) {
  if (kind == NormKind::kLayerNorm) mean_ = memory.take(saved, DType::kFloat32, rows);
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
  const size_t s = size_t(slot);
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
  if (kind_ == NormKind::kLayerNorm) {
    ctx.backend.layernorm_backward(dx, gw, gb, dout, x, params_.w, mean_[s], rstd_[s], N, C_);
  } else {
    ctx.backend.rmsnorm_backward(dx, gw, dout, x, params_.w, rstd_[s], N, C_);
  }
  if (sp) {
    const TensorView own = ctx.scratch.norm_grads.first(n);
    ctx.tp.allreduce(own, ReduceOp::kSum);
    ctx.backend.add(g.all(), g.all(), own, n);
  }
  g.release();
}

}  // namespace feast
