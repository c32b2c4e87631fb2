#include "model/layers/linear.h"

namespace feast {

ColumnParallelLinear::ColumnParallelLinear(const LocalTable& table, const TensorView& params, const std::string& name,
                                           bool has_bias, int in, int out_local)
    : p_(weight_and_bias(table, params, name, has_bias)), in_(in), out_(out_local) {}

void ColumnParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  ctx.backend.matmul_forward(out, x, p_.w, p_.b, N, in_, out_);
}

void ColumnParallelLinear::forward_gelu(const LayerContext& ctx, const TensorView& pre, const TensorView& act,
                                        const TensorView& x, int N) const {
  ctx.backend.matmul_gelu_forward(pre, act, x, p_.w, p_.b, N, in_, out_);
}

void ColumnParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                    const TensorView& x, int N, GradientSink& sink) const {
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(dx, g.w(), g.b(), dout, x, p_.w, N, in_, out_);
  g.release();
  ctx.tp.copy_to_tp_backward(dx.first(size_t(N) * size_t(in_)));
}

RowParallelLinear::RowParallelLinear(const LocalTable& table, const TensorView& params, const std::string& name,
                                     bool has_bias, int in_local, int out)
    : p_(weight_and_bias(table, params, name, has_bias)), in_(in_local), out_(out) {}

void RowParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  ctx.backend.matmul_forward(out, x, p_.w, ctx.tp.rank() == 0 ? p_.b : TensorView{}, N, in_, out_);
  ctx.tp.reduce_from_tp_forward(out.first(size_t(N) * size_t(out_)));
}

void RowParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                 const TensorView& x, int N, GradientSink& sink) const {
  AcquiredGrads g(sink, p_);
  ctx.backend.matmul_backward(dx, g.w(), g.b(), dout, x, p_.w, N, in_, out_);
  g.release();
}

}  // namespace feast
