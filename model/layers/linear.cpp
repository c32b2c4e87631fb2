#include "model/layers/linear.h"

namespace feast {

ColumnParallelLinear::ColumnParallelLinear(const LocalTable& table, const TensorView& params, const std::string& name,
                                           bool has_bias, int in, int out_local)
    : p_(weight_and_bias(table, params, name, has_bias)), in_(in), out_(out_local) {}

void ColumnParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  ctx.backend.matmul_forward(out, all_rows(ctx, x, N, in_), p_.w, p_.b, N, in_, out_);
}

void ColumnParallelLinear::forward_gelu(const LayerContext& ctx, const TensorView& pre, const TensorView& act,
                                        const TensorView& x, int N) const {
  ctx.backend.matmul_gelu_forward(pre, act, all_rows(ctx, x, N, in_), p_.w, p_.b, N, in_, out_);
}

void ColumnParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                    const TensorView& x, int N, GradientSink& sink) const {
  const TensorView in = all_rows(ctx, x, N, in_), din = partial_sums(ctx, dx);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(din, g.w(), g.b(), dout, in, p_.w, N, in_, out_);
  g.release();
  sum_partials(ctx, din, dx, N, in_);
}

void ColumnParallelLinear::backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                          int N) const {
  const TensorView din = partial_sums(ctx, dx);
  ctx.backend.matmul_backward_input(din, dout, p_.w, N, in_, out_);
  sum_partials(ctx, din, dx, N, in_);
}

void ColumnParallelLinear::backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x,
                                           int N, GradientSink& sink) const {
  const TensorView in = all_rows(ctx, x, N, in_);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(TensorView{}, g.w(), g.b(), dout, in, p_.w, N, in_, out_);
  g.release();
}

RowParallelLinear::RowParallelLinear(const LocalTable& table, const TensorView& params, const std::string& name,
                                     bool has_bias, int in_local, int out)
    : p_(weight_and_bias(table, params, name, has_bias)), in_(in_local), out_(out) {}

void RowParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  const TensorView sum = partial_sums(ctx, out);
  ctx.backend.matmul_forward(sum, x, p_.w, ctx.tp.rank() == 0 ? p_.b : TensorView{}, N, in_, out_);
  sum_partials(ctx, sum, out, N, out_);
}

void RowParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                 const TensorView& x, int N, GradientSink& sink) const {
  const TensorView d = all_rows(ctx, dout, N, out_);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(dx, g.w(), g.b(), d, x, p_.w, N, in_, out_);
  g.release();
}

void RowParallelLinear::backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                       int N) const {
  ctx.backend.matmul_backward_input(dx, all_rows(ctx, dout, N, out_), p_.w, N, in_, out_);
}

void RowParallelLinear::backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x, int N,
                                        GradientSink& sink) const {
  const TensorView d = all_rows(ctx, dout, N, out_);
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(TensorView{}, g.w(), g.b(), d, x, p_.w, N, in_, out_);
  g.release();
}

}  // namespace feast
