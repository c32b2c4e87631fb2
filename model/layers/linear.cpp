#include "model/layers/linear.h"

namespace feast {

ColumnParallelLinear::ColumnParallelLinear(const LocalTable& table, const TensorView& params, const std::string& name,
                                           bool has_bias, int in, int out_local)
    : p_(weight_and_bias(table, params, name, has_bias)), in_(in), out_(out_local) {}

TensorView ColumnParallelLinear::full_input(const LayerContext& ctx, const TensorView& x, int N) const {
  if (!ctx.tp.sequence_parallel()) return x;
  ctx.tp.gather_from_sp_forward(x, ctx.scratch.gathered, N, in_);
  return ctx.scratch.gathered;
}

void ColumnParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  ctx.backend.matmul_forward(out, full_input(ctx, x, N), p_.w, p_.b, N, in_, out_);
}

void ColumnParallelLinear::forward_gelu(const LayerContext& ctx, const TensorView& pre, const TensorView& act,
                                        const TensorView& x, int N) const {
  ctx.backend.matmul_gelu_forward(pre, act, full_input(ctx, x, N), p_.w, p_.b, N, in_, out_);
}

void ColumnParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                    const TensorView& x, int N, GradientSink& sink) const {
  const bool sp = ctx.tp.sequence_parallel();
  const TensorView in = full_input(ctx, x, N), din = sp ? ctx.scratch.partial : dx;
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(din, g.w(), g.b(), dout, in, p_.w, N, in_, out_);
  g.release();
  if (sp)
    ctx.tp.gather_from_sp_backward(din, dx, N, in_);
  else
    ctx.tp.copy_to_tp_backward(dx.first(size_t(N) * size_t(in_)));
}

void ColumnParallelLinear::backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                          int N) const {
  const bool sp = ctx.tp.sequence_parallel();
  const TensorView din = sp ? ctx.scratch.partial : dx;
  ctx.backend.matmul_backward_input(din, dout, p_.w, N, in_, out_);
  if (sp)
    ctx.tp.gather_from_sp_backward(din, dx, N, in_);
  else
    ctx.tp.copy_to_tp_backward(dx.first(size_t(N) * size_t(in_)));
}

void ColumnParallelLinear::backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x,
                                           int N, GradientSink& sink) const {
  const TensorView in = full_input(ctx, x, N);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(TensorView{}, g.w(), g.b(), dout, in, p_.w, N, in_, out_);
  g.release();
}

RowParallelLinear::RowParallelLinear(const LocalTable& table, const TensorView& params, const std::string& name,
                                     bool has_bias, int in_local, int out)
    : p_(weight_and_bias(table, params, name, has_bias)), in_(in_local), out_(out) {}

void RowParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  const bool sp = ctx.tp.sequence_parallel();
  const TensorView sum = sp ? ctx.scratch.partial : out;
  ctx.backend.matmul_forward(sum, x, p_.w, ctx.tp.rank() == 0 ? p_.b : TensorView{}, N, in_, out_);
  if (sp)
    ctx.tp.reduce_scatter_to_sp_forward(sum, out, N, out_);
  else
    ctx.tp.reduce_from_tp_forward(out.first(size_t(N) * size_t(out_)));
}

TensorView RowParallelLinear::full_output_grad(const LayerContext& ctx, const TensorView& dout, int N) const {
  if (!ctx.tp.sequence_parallel()) return dout;
  ctx.tp.reduce_scatter_to_sp_backward(dout, ctx.scratch.gathered, N, out_);
  return ctx.scratch.gathered;
}

void RowParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                 const TensorView& x, int N, GradientSink& sink) const {
  const TensorView d = full_output_grad(ctx, dout, N);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(dx, g.w(), g.b(), d, x, p_.w, N, in_, out_);
  g.release();
}

void RowParallelLinear::backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                       int N) const {
  ctx.backend.matmul_backward_input(dx, full_output_grad(ctx, dout, N), p_.w, N, in_, out_);
}

void RowParallelLinear::backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x, int N,
                                        GradientSink& sink) const {
  const TensorView d = full_output_grad(ctx, dout, N);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(TensorView{}, g.w(), g.b(), d, x, p_.w, N, in_, out_);
  g.release();
}

}  // namespace feast
