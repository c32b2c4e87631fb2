#include "model/layers/layer_context.h"

#include "core/error.h"

namespace feast {

TensorView all_rows(const LayerContext& ctx, const TensorView& rows, int N, int C) {
  if (!ctx.tp.sequence_parallel()) return rows;
  ctx.tp.gather_rows(rows, ctx.scratch.gathered, N, C);
  return ctx.scratch.gathered;
}

TensorView partial_sums(const LayerContext& ctx, const TensorView& out) {
  return ctx.tp.sequence_parallel() ? ctx.scratch.partial : out;
}

void sum_partials(const LayerContext& ctx, const TensorView& partial, const TensorView& out, int N, int C) {
  if (ctx.tp.sequence_parallel())
    ctx.tp.reduce_scatter_rows(partial, out, N, C);
  else
    ctx.tp.allreduce(out.first(size_t(N) * size_t(C)), ReduceOp::kSum);
}

WeightAndBias weight_and_bias(const ParamSource& source, const std::string& name, bool has_bias) {
  const LocalTable& table = *source.table;
  const TensorView& params = source.values;
  WeightAndBias p;
  p.frozen = source.frozen;
  p.weight = &table.at(name + ".weight");
  p.w = params.slice(p.weight->offset, p.weight->numel);
  p.range = {p.weight->offset, p.weight->offset + p.weight->numel};
  if (has_bias) {
    p.bias = &table.at(name + ".bias");
    FEAST_CHECK(p.bias->offset == p.range.end, name << ".bias does not follow its weight in the flat buffer");
    p.b = params.slice(p.bias->offset, p.bias->numel);
    p.range.end = p.bias->offset + p.bias->numel;
  }
  return p;
}

AcquiredGrads::AcquiredGrads(GradientSink& sink, const WeightAndBias& p) : sink_(sink), range_(p.range) {
  all_ = sink.acquire(range_.begin, range_.end);
  w_ = all_.first(p.weight->numel);
  if (p.bias) b_ = all_.slice(p.weight->numel, p.bias->numel);
}

}  // namespace feast
