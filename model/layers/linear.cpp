#include "model/layers/linear.h"

#include "core/error.h"

namespace feast {

std::vector<LoraAdapter> find_adapters(const LayerParams& p, int layer, const std::string& linear, int in,
                                       int out_local) {
  std::vector<LoraAdapter> out;
  if (!p.has_adapters()) return out;
  const LocalTable& table = *p.adapters.table;
  const std::string weight = "layers." + std::to_string(layer) + "." + linear + ".weight";
  const std::vector<LoraTarget>& targets = lora_targets(p.config);
  for (size_t target = 0; target < targets.size(); ++target) {
    const LoraTarget& t = targets[target];
    if (t.linear != linear || !table.contains(lora_a_name(layer, t.name))) continue;
    LoraAdapter a;
    a.a = &table.at(lora_a_name(layer, t.name));
    a.b = &table.at(lora_b_name(layer, t.name));
    FEAST_CHECK(a.b->offset == a.a->offset + a.a->numel, a.b->spec->name << " does not follow its A");
    a.a_view = p.adapters.values.slice(a.a->offset, a.a->numel);
    a.b_view = p.adapters.values.slice(a.b->offset, a.b->numel);
    a.range = {a.a->offset, a.b->offset + a.b->numel};
    int col = 0;  // a block's local rows sit after the earlier blocks' local rows
    for (int i = 0; i < t.block; ++i) col += int(p.base.at(weight).spec->blocks[size_t(i)] / a.b->tp);
    a.shape = {0, in, int(a.a->shape[0]), int(a.b->shape[0]), out_local, col, p.lora.scale()};
    FEAST_CHECK(a.a->shape[1] == in, a.a->spec->name << " has " << a.a->shape[1] << " columns, the product " << in);
    a.layer = layer;
    a.target = int(target);
    // A row-parallel product's A is split by input columns: this rank's are its slice's.
    const bool split = a.a->spec->split != TpSplit::kReplicated;
    a.col0 = split ? a.a->tp_rank * in : 0;
    a.columns = split ? a.a->tp * in : in;
    a.shape.check(a.b->spec->name);
    out.push_back(a);
  }
  return out;
}

namespace {

// The adapter's dropout on the micro-batch's N rows.
DropoutShape dropout_of(const LayerContext& ctx, const LoraAdapter& a, int N) {
  const LoraDropout& d = ctx.dropout;
  DropoutShape s;
  s.N = N;
  s.C = a.shape.C;
  s.T = d.T;
  s.first_sequence = d.first_sequence;
  s.col0 = a.col0;
  s.columns = a.columns;
  s.stream = lora_dropout_stream(d.seed, d.step, a.layer, a.target);
  s.p = d.p;
  return s;
}

// The adapter's input: x, or under dropout x with the adapter's mask applied, in the scratch.
TensorView adapter_input(const LayerContext& ctx, const LoraAdapter& a, const TensorView& x, int N) {
  if (!ctx.dropout.active()) return x;
  const TensorView dropped = ctx.scratch.lora_dropped.first(size_t(N) * size_t(a.shape.C));
  ctx.backend.dropout_forward(dropped, x, dropout_of(ctx, a, N));
  return dropped;
}

void adapters_forward(const LayerContext& ctx, const std::vector<LoraAdapter>& adapters, const TensorView& out,
                      const TensorView& x, int N) {
  for (const LoraAdapter& a : adapters) {
    LoraShape s = a.shape;
    s.N = N;
    ctx.backend.lora_forward(out, ctx.scratch.lora_h, adapter_input(ctx, a, x, N), a.a_view, a.b_view, s);
  }
}

// Each adapter's gradients through the sink and, when dx is given, dx += its input gradient. The
// matrix kept whole over tensor parallelism (A of a column-parallel product, B of a row-parallel
// one: model/lora.h) gets a partial sum on each rank, summed over the group before it is added.
void adapters_backward(const LayerContext& ctx, const std::vector<LoraAdapter>& adapters, const TensorView& dx,
                       const TensorView& dout, const TensorView& x, int N, GradientSink& sink) {
  for (const LoraAdapter& a : adapters) {
    const TensorView g = sink.acquire(a.range.begin, a.range.end);
    TensorView da = g.first(a.a->numel), db = g.slice(a.a->numel, a.b->numel);
    TensorView* whole = nullptr;  // the gradient that is partial here, when tp splits the other matrix
    if (a.a->tp > 1) whole = a.a->spec->split == TpSplit::kReplicated ? &da : &db;
    const TensorView into = whole ? *whole : TensorView{};
    if (whole) {
      *whole = ctx.scratch.lora_grads.first(into.numel);
      ctx.backend.zero(*whole);
    }
    LoraShape s = a.shape;
    s.N = N;
    // Under dropout the adapter saw the dropped input (drawn again here): its input gradient
    // goes through the same mask into dx.
    const TensorView in = adapter_input(ctx, a, x, N);
    TensorView din = dx;
    if (ctx.dropout.active() && dx) {
      din = ctx.scratch.lora_dropped_grad.first(size_t(N) * size_t(a.shape.C));
      ctx.backend.zero(din);
    }
    ctx.backend.lora_backward(din, da, db, ctx.scratch.lora_h, ctx.scratch.lora_dh, dout, in, a.a_view, a.b_view, s);
    if (ctx.dropout.active() && dx) ctx.backend.dropout_backward(dx, din, dropout_of(ctx, a, N));
    if (whole) {
      ctx.tp.allreduce(*whole, ReduceOp::kSum);
      ctx.backend.add(into, into, *whole, into.numel);
    }
    sink.release(a.range.begin, a.range.end);
  }
}

// A product's backward from dout: dx = dout @ W (dx may be empty: no input gradient) and, unless
// the weight is frozen, its weight and bias gradients through the sink.
void product_backward(const LayerContext& ctx, const WeightAndBias& p, const TensorView& dx, const TensorView& dout,
                      const TensorView& x, int N, int in, int out, GradientSink& sink) {
  if (p.frozen) {
    ctx.backend.matmul_backward_input(dx, dout, weight_of(ctx, p), N, in, out);
    return;
  }
  AcquiredGrads g(sink, p);
  ctx.backend.matmul_backward(dx, g.w(), g.b(), dout, x, weight_of(ctx, p), N, in, out);
  g.release();
}

std::vector<FlatRange> ranges_of(const WeightAndBias& p, const std::vector<LoraAdapter>& adapters) {
  std::vector<FlatRange> out;
  if (!p.frozen) out.push_back(p.range);
  for (const LoraAdapter& a : adapters) out.push_back(a.range);
  return out;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const LayerParams& params, int layer, const std::string& linear,
                                           bool has_bias, int in, int out_local)
    : p_(weight_and_bias(params.base, "layers." + std::to_string(layer) + "." + linear, has_bias)),
      in_(in),
      out_(out_local),
      adapters_(find_adapters(params, layer, linear, in, out_local)) {}

std::vector<FlatRange> ColumnParallelLinear::grad_ranges() const { return ranges_of(p_, adapters_); }

void ColumnParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  const TensorView in = all_rows(ctx, x, N, in_);
  ctx.backend.matmul_forward(out, in, weight_of(ctx, p_), p_.b, N, in_, out_);
  adapters_forward(ctx, adapters_, out, in, N);
}

void ColumnParallelLinear::forward_gelu(const LayerContext& ctx, const TensorView& pre, const TensorView& act,
                                        const TensorView& x, int N) const {
  if (adapters_.empty()) {
    ctx.backend.matmul_gelu_forward(pre, act, all_rows(ctx, x, N, in_), weight_of(ctx, p_), p_.b, N, in_, out_);
    return;
  }
  forward(ctx, pre, x, N);  // the adapters add to the product before the activation
  ctx.backend.gelu_forward(act, pre, size_t(N) * size_t(out_));
}

void ColumnParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                    const TensorView& x, int N, GradientSink& sink) const {
  const TensorView in = all_rows(ctx, x, N, in_), din = partial_sums(ctx, dx);
  product_backward(ctx, p_, din, dout, in, N, in_, out_, sink);
  adapters_backward(ctx, adapters_, din, dout, in, N, sink);
  sum_partials(ctx, din, dx, N, in_);
}

void ColumnParallelLinear::backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                          int N) const {
  const TensorView din = partial_sums(ctx, dx);
  ctx.backend.matmul_backward_input(din, dout, weight_of(ctx, p_), N, in_, out_);
  sum_partials(ctx, din, dx, N, in_);
}

void ColumnParallelLinear::backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x,
                                           int N, GradientSink& sink) const {
  product_backward(ctx, p_, TensorView{}, dout, all_rows(ctx, x, N, in_), N, in_, out_, sink);
}

RowParallelLinear::RowParallelLinear(const LayerParams& params, int layer, const std::string& linear, bool has_bias,
                                     int in_local, int out)
    : p_(weight_and_bias(params.base, "layers." + std::to_string(layer) + "." + linear, has_bias)),
      in_(in_local),
      out_(out),
      adapters_(find_adapters(params, layer, linear, in_local, out)) {}

std::vector<FlatRange> RowParallelLinear::grad_ranges() const { return ranges_of(p_, adapters_); }

void RowParallelLinear::forward(const LayerContext& ctx, const TensorView& out, const TensorView& x, int N) const {
  const TensorView sum = partial_sums(ctx, out);
  ctx.backend.matmul_forward(sum, x, weight_of(ctx, p_), ctx.tp.rank() == 0 ? p_.b : TensorView{}, N, in_, out_);
  // B (A_r x_r) is this rank's partial sum of the update: the product's reduction sums it too.
  adapters_forward(ctx, adapters_, sum, x, N);
  sum_partials(ctx, sum, out, N, out_);
}

void RowParallelLinear::backward(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                 const TensorView& x, int N, GradientSink& sink) const {
  const TensorView d = all_rows(ctx, dout, N, out_);
  product_backward(ctx, p_, dx, d, x, N, in_, out_, sink);
  adapters_backward(ctx, adapters_, dx, d, x, N, sink);
}

void RowParallelLinear::backward_input(const LayerContext& ctx, const TensorView& dx, const TensorView& dout,
                                       int N) const {
  ctx.backend.matmul_backward_input(dx, all_rows(ctx, dout, N, out_), weight_of(ctx, p_), N, in_, out_);
}

void RowParallelLinear::backward_weight(const LayerContext& ctx, const TensorView& dout, const TensorView& x, int N,
                                        GradientSink& sink) const {
  product_backward(ctx, p_, TensorView{}, all_rows(ctx, dout, N, out_), x, N, in_, out_, sink);
}

}  // namespace feast
