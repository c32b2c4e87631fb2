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

const LocalParam& ParamSource::at(const std::string& name) const {
  if (apart && apart->table().contains(name)) return apart->table().at(name);
  return table->at(name);
}

WeightAndBias weight_and_bias(const ParamSource& source, const std::string& name, bool has_bias) {
  const LocalTable& table = *source.table;
  const TensorView& params = source.values;
  WeightAndBias p;
  p.frozen = source.frozen;
  if (source.apart && source.apart->table().contains(name + ".weight")) {
    FEAST_CHECK(source.frozen, name << ".weight is stored apart but trains");
    p.apart = source.apart;
    p.weight = &source.apart->table().at(name + ".weight");
  } else {
    p.weight = &table.at(name + ".weight");
    p.w = params.slice(p.weight->offset, p.weight->numel);
    p.range = {p.weight->offset, p.weight->offset + p.weight->numel};
  }
  if (has_bias) {
    p.bias = &table.at(name + ".bias");
    FEAST_CHECK(p.apart || p.bias->offset == p.range.end, name << ".bias does not follow its weight in the flat buffer");
    p.b = params.slice(p.bias->offset, p.bias->numel);
    if (p.apart) p.range.begin = p.bias->offset;
    p.range.end = p.bias->offset + p.bias->numel;
  }
  return p;
}

TensorView weight_of(const LayerContext& ctx, const WeightAndBias& p) {
  return p.apart ? p.apart->materialize(*p.weight, ctx.scratch.dequantized) : p.w;
}

AcquiredGrads::AcquiredGrads(GradientSink& sink, const WeightAndBias& p) : sink_(sink), range_(p.range) {
  all_ = sink.acquire(range_.begin, range_.end);
  w_ = all_.first(p.weight->numel);
  if (p.bias) b_ = all_.slice(p.weight->numel, p.bias->numel);
}

}  // namespace feast
