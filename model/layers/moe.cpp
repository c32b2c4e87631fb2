#include "model/layers/moe.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace feast {

MoeRecorder::MoeRecorder(const MoeConfig& moe, int slots, int layers, int local_layers, int ep)
    : moe_(moe), layers_(layers), local_layers_(local_layers), ep_(ep), slots_(size_t(slots)) {
  FEAST_CHECK(ep >= 1 && moe.n_experts % ep == 0,
              "expert parallelism of " << ep << " over " << moe.n_experts << " experts");
  const size_t E = size_t(moe.n_experts);
  for (Slot& s : slots_) {
    s.requested.assign(E, 0);
    s.prob_sum.assign(E, 0);
    s.dprob.assign(E, 0.0f);
  }
  step_.load.assign(size_t(local_layers) * E, 0);
}

void MoeRecorder::begin(int slot, int tokens, double weight) {
  Slot& s = slots_[size_t(slot)];
  std::fill(s.requested.begin(), s.requested.end(), 0.0);
  std::fill(s.prob_sum.begin(), s.prob_sum.end(), 0.0);
  std::fill(s.dprob.begin(), s.dprob.end(), 0.0f);
  s.tokens = tokens;
  s.weight = weight;
  // The z-loss of a block is the mean over tokens of lse^2: d / d lse[n] = 2 lse[n] coef / N.
  s.z_scale = float(moe_.z_loss_coef * weight / double(std::max(1, tokens)));
}

void MoeRecorder::add(int slot, int local_layer, const std::vector<int>& requested, const std::vector<float>& prob_sum,
                      double lse_squares, int64_t dropped) {
  Slot& s = slots_[size_t(slot)];
  const size_t E = s.requested.size();
  for (size_t e = 0; e < E; ++e) {
    s.requested[e] += requested[e];
    s.prob_sum[e] += prob_sum[e];
  }
  if (s.weight > 0) {  // a training micro-batch: the step's metrics
    for (size_t e = 0; e < E; ++e) step_.load[size_t(local_layer) * E + e] += requested[e];
    step_.dropped += double(dropped);
    step_.z_loss += s.weight * lse_squares / double(std::max(1, s.tokens));
  }
}

std::vector<double> MoeRecorder::sums(int slot) const {
  const Slot& s = slots_[size_t(slot)];
  std::vector<double> out(s.requested);
  out.insert(out.end(), s.prob_sum.begin(), s.prob_sum.end());
  return out;
}

void MoeRecorder::set(int slot, const std::vector<double>& totals) {
  Slot& s = slots_[size_t(slot)];
  std::fill(s.requested.begin(), s.requested.end(), 0.0);
  std::fill(s.prob_sum.begin(), s.prob_sum.end(), 0.0);
  merge(slot, totals);
}

void MoeRecorder::merge(int slot, const std::vector<double>& other) {
  Slot& s = slots_[size_t(slot)];
  const size_t E = s.requested.size();
  FEAST_CHECK(other.size() == 2 * E, "MoE sums of " << other.size() << " values for " << E << " experts");
  for (size_t e = 0; e < E; ++e) {
    s.requested[e] += other[e];
    s.prob_sum[e] += other[E + e];
  }
}

void MoeRecorder::finish(int slot, bool record) {
  Slot& s = slots_[size_t(slot)];
  const size_t E = s.requested.size();
  // transformers' load_balancing_loss_func over the concatenated layers: rows = tokens x layers,
  // E * sum_e (choices of e / rows) * (probabilities of e / rows).
  const double rows = double(s.tokens) * double(layers_);
  double aux = 0;
  for (size_t e = 0; e < E; ++e) aux += s.requested[e] * s.prob_sum[e];
  aux *= double(E) / (rows * rows);
  if (s.weight > 0 && record) step_.aux_loss += s.weight * aux;
  const double scale = moe_.aux_loss_coef * s.weight * double(E) / (rows * rows);
  for (size_t e = 0; e < E; ++e) s.dprob[e] = float(scale * s.requested[e]);
}

MoeRecorder::StepTotals MoeRecorder::take_step() {
  StepTotals out = step_;
  step_ = StepTotals{};
  step_.load.assign(out.load.size(), 0);
  return out;
}

namespace {

std::string expert_name(int layer, int e, const std::string& part) {
  return "layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." + part;
}

}  // namespace

MoeMlp::MoeMlp(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer, int tp,
               size_t rows, ActivationMemory& memory, MoeRecorder& recorder, int local_layer)
    : C_(config.n_embd),
      E_(config.moe.n_experts),
      k_(config.moe.top_k),
      width_(config.expert_width() / tp),
      capacity_factor_(config.moe.capacity_factor),
      renormalize_(config.moe.norm_topk_prob),
      local_layer_(local_layer),
      recorder_(recorder) {
  FEAST_CHECK(arch.mlp == MlpKind::kSwiGlu && !arch.linear_bias, "mixture-of-experts blocks are SwiGLU without biases");
  const std::string prefix = "layers." + std::to_string(layer) + ".mlp.";
  router_ = weight_and_bias(params.base, prefix + "router", false);
  // This rank's experts, in order: those its parameter table holds (all of them, or under expert
  // parallelism its ep rank's share: StageSpec::holds_expert).
  for (int e = 0; e < E_; ++e) {
    if (!params.base.table->contains(expert_name(layer, e, "fc.weight"))) continue;
    fc_.push_back(weight_and_bias(params.base, expert_name(layer, e, "fc"), false));
    proj_.push_back(weight_and_bias(params.base, expert_name(layer, e, "proj"), false));
  }
  FEAST_CHECK(int(fc_.size()) * recorder.ep() == E_,
              "layer " << layer << " holds " << fc_.size() << " of " << E_ << " experts at ep " << recorder.ep());
  if (config.shared_expert_width() > 0) {
    shared_ = std::make_unique<Mlp>(config, arch, params, layer, tp, rows, memory, Recompute::kNone, "mlp.shared",
                                    config.shared_expert_width());
    if (config.moe.shared_expert_gate) shared_gate_ = weight_and_bias(params.base, prefix + "shared_gate", false);
  }
  const size_t N = rows, Nk = rows * size_t(k_), E = size_t(E_);
  // The rows this rank's experts may take: its own tokens' choices, or under expert parallelism
  // at most every ep rank's (all of them choosing this rank's experts), fewer under a capacity.
  const size_t R = expert_rows_bound(capacity_factor_, int(N), k_, E_, recorder.ep());
  const DType dt = memory.dtype();
  probs_ = memory.take(true, DType::kFloat32, N * E);
  lse_ = memory.take(true, DType::kFloat32, N);
  expert_ = memory.take(true, DType::kInt32, Nk);
  weight_ = memory.take(true, DType::kFloat32, Nk);
  slot_ = memory.take(true, DType::kInt32, Nk);
  token_ = memory.take(true, DType::kInt32, Nk);
  pre_ = memory.take(true, dt, R * 2 * size_t(width_));
  act_ = memory.take(true, dt, R * size_t(width_));
  out_ = memory.take(true, dt, Nk * size_t(C_));
  if (recorder.ep() > 1) {
    local_rows_ = memory.take(true, dt, R * size_t(C_));
    to_experts_ = memory.take(true, DType::kInt32, R);
    to_ranks_ = memory.take(true, DType::kInt32, R);
    exchanges_.resize(size_t(memory.slots()));
  }
  if (shared_) {
    shared_out_ = memory.take(true, dt, N * size_t(C_));
    if (shared_gate_.weight) gate_ = memory.take(true, DType::kFloat32, N);
    Backend& be = memory.backend();
    std::vector<int32_t> identity(N);
    std::iota(identity.begin(), identity.end(), 0);
    const std::vector<float> ones(N, 1.0f);
    identity_ = be.allocate(DType::kInt32, N);
    ones_ = be.allocate(DType::kFloat32, N);
    be.copy(identity_.view(), host_view(identity.data(), N));
    be.copy(ones_.view(), host_view(ones.data(), N));
  }
  plans_.resize(size_t(memory.slots()));
}

std::vector<FlatRange> MoeMlp::grad_ranges() const {
  std::vector<FlatRange> out = {router_.range};
  for (size_t e = 0; e < fc_.size(); ++e) {
    out.push_back(fc_[e].range);
    out.push_back(proj_[e].range);
  }
  if (shared_)
    for (const FlatRange& r : shared_->grad_ranges()) out.push_back(r);
  if (shared_gate_.weight) out.push_back(shared_gate_.range);
  return out;
}

void MoeMlp::forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int N) {
  Backend& be = ctx.backend;
  const MoeScratch& sc = ctx.scratch.moe;
  const size_t s = size_t(slot), NC = size_t(N) * size_t(C_), Nk = size_t(N) * size_t(k_);
  // The router: logits, softmax, top k; its choices come to the host for the routing plan.
  be.matmul_forward(sc.logits, x, weight_of(ctx, router_), {}, N, C_, E_);
  be.moe_route(probs_[s], lse_[s], expert_[s], weight_[s], sc.prob_sum, sc.logits, N, E_, k_, renormalize_);
  std::vector<int32_t> expert(Nk);
  be.copy(host_view(expert.data(), Nk), expert_[s].first(Nk));
  RoutingPlan& plan = plans_[s];
  plan = plan_routing(expert.data(), N, k_, E_, expert_capacity(capacity_factor_, N, k_, E_));
  const int M = plan.routed_rows();
  be.copy(slot_[s].first(Nk), host_view(plan.slot.data(), Nk));
  if (M > 0) be.copy(token_[s].first(size_t(M)), host_view(plan.token.data(), size_t(M)));
  std::vector<float> prob_sum(static_cast<size_t>(E_));
  be.copy(host_view(prob_sum.data(), prob_sum.size()), sc.prob_sum.first(size_t(E_)));
  recorder_.add(slot, local_layer_, plan.requested, prob_sum, be.sum_of_squares(lse_[s].first(size_t(N))),
                plan.dropped);

  be.moe_gather(sc.rows, x, token_[s], M, C_);  // this rank's tokens, expert by expert
  if (recorder_.ep() == 1) {
    experts_forward(ctx, slot, plan.offsets, sc.rows, out_[s]);
  } else {
    // The counts first: how many rows of each of its experts every ep rank will receive.
    std::vector<int32_t> sent(plan.rows.begin(), plan.rows.end()), got(static_cast<size_t>(E_));
    Timer timer;
    recorder_.expert_group()->alltoall(sent.data(), got.data(), fc_.size(), DType::kInt32)->wait();
    recorder_.add_exchange_seconds(timer.seconds());
    ExpertExchange& ex = exchanges_[s];
    ex = plan_exchange(plan.rows, got, recorder_.ep());
    const int R = ex.rows();
    if (R > 0) {
      be.copy(to_experts_[s].first(size_t(R)), host_view(ex.to_experts.data(), size_t(R)));
      be.copy(to_ranks_[s].first(size_t(R)), host_view(ex.to_ranks.data(), size_t(R)));
    }
    exchange(ex, sc.rows, sc.exchange_a, /*outward=*/true);
    be.moe_gather(local_rows_[s], sc.exchange_a, to_experts_[s], R, C_);
    experts_forward(ctx, slot, ex.local_offsets, local_rows_[s], sc.exchange_a);
    be.moe_gather(sc.exchange_b, sc.exchange_a, to_ranks_[s], R, C_);
    exchange(ex, sc.exchange_b, out_[s], /*outward=*/false);
  }
  be.zero(out.first(NC));
  be.moe_combine(out, out_[s], slot_[s], weight_[s], N, k_, C_);
  ctx.tp.allreduce(out.first(NC), ReduceOp::kSum);

  if (!shared_) return;
  shared_->forward(ctx, slot, x, shared_out_[s], N);
  if (shared_gate_.weight) {
    be.matmul_forward(sc.gate_logits, x, weight_of(ctx, shared_gate_), {}, N, C_, 1);
    be.moe_shared_gate(gate_[s], sc.gate_logits, N);
  }
  be.moe_combine(out, shared_out_[s], identity_.view(), shared_weight(slot), N, 1, C_);
}

void MoeMlp::backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx,
                      const TensorView& x, int N, GradientSink& sink) {
  Backend& be = ctx.backend;
  const MoeScratch& sc = ctx.scratch.moe;
  const size_t s = size_t(slot), NC = size_t(N) * size_t(C_), Nk = size_t(N) * size_t(k_);
  const RoutingPlan& plan = plans_[s];
  const int M = plan.routed_rows();
  // The gradients are acquired in descending flat order (shared gate, shared experts, the
  // experts from the last, the router), as every layer's are: a ZeRO-2 sink stages a few buckets
  // at a time and reduces each once backward has moved below it.

  // The combine of the routed experts: each row's output gradient, and the router weights'
  // gradient (summed over the group: each rank's outputs are partial).
  be.moe_combine_backward(sc.drows, sc.dweight, dout, out_[s], slot_[s], weight_[s], N, k_, C_);
  ctx.tp.allreduce(sc.dweight.first(Nk), ReduceOp::kSum);

  // The shared experts and their gate: their input gradient (whole over the group) in sc.part.
  if (shared_) {
    be.moe_combine_backward(sc.dshared, sc.dgate, dout, shared_out_[s], identity_.view(), shared_weight(slot), N, 1,
                            C_);
    if (shared_gate_.weight) {
      be.moe_shared_gate_backward(sc.gate_logits, gate_[s], sc.dgate, N);
      AcquiredGrads g(sink, shared_gate_);
      be.matmul_backward(sc.part, g.w(), {}, sc.gate_logits, x, weight_of(ctx, shared_gate_), N, C_, 1);
      g.release();
    } else {
      be.zero(sc.part.first(NC));
    }
    // In place: the MLP's output gradient is read before its input gradient is written.
    shared_->backward(ctx, slot, sc.dshared, sc.dshared, x, N, sink);
    be.add(sc.part, sc.part, sc.dshared, NC);
  }

  if (recorder_.ep() == 1) {
    be.moe_gather(sc.rows, x, token_[s], M, C_);  // the experts' inputs again, rather than kept
    experts_backward(ctx, slot, plan.offsets, sc.rows, sc.drows, sc.drows, sink);
  } else {
    // The output gradients go to the experts' ranks, their input gradients come back.
    const ExpertExchange& ex = exchanges_[s];
    const int R = ex.rows();
    exchange(ex, sc.drows, sc.exchange_a, /*outward=*/true);
    be.moe_gather(sc.exchange_b, sc.exchange_a, to_experts_[s], R, C_);
    experts_backward(ctx, slot, ex.local_offsets, local_rows_[s], sc.exchange_b, sc.exchange_a, sink);
    be.moe_gather(sc.exchange_b, sc.exchange_a, to_ranks_[s], R, C_);
    exchange(ex, sc.exchange_b, sc.drows, /*outward=*/false);
  }
  be.zero(dx.first(NC));
  be.moe_gather_backward(dx, sc.drows, slot_[s], N, k_, C_);
  ctx.tp.allreduce(dx.first(NC), ReduceOp::kSum);

  // The router, with the auxiliary losses' gradients; its input gradient in the rows' buffer,
  // free now (it holds at least N rows).
  const std::vector<float>& dprob = recorder_.dprob(slot);
  be.copy(sc.dprob.first(dprob.size()), host_view(dprob.data(), dprob.size()));
  be.moe_route_backward(sc.logits, probs_[s], lse_[s], expert_[s], weight_[s], sc.dweight, sc.dprob,
                        recorder_.z_scale(slot), N, E_, k_, renormalize_);
  const TensorView router_dx = sc.drows.first(NC);
  {
    AcquiredGrads g(sink, router_);
    be.matmul_backward(router_dx, g.w(), {}, sc.logits, x, weight_of(ctx, router_), N, C_, E_);
    g.release();
  }
  be.add(dx, dx, router_dx, NC);
  if (shared_) be.add(dx, dx, sc.part, NC);
}

void MoeMlp::experts_forward(const LayerContext& ctx, int slot, const std::vector<int>& offsets, const TensorView& rows,
                             const TensorView& y) {
  Backend& be = ctx.backend;
  const size_t s = size_t(slot);
  const int F = 2 * width_, R = offsets.back();
  // Each projection is one grouped product over every expert's rows (Backend::grouped_matmul_*).
  be.grouped_matmul_forward(pre_[s], rows, expert_weights(ctx, fc_), offsets, C_, F);
  if (R > 0) be.swiglu_forward(act_[s], pre_[s], R, width_);
  be.grouped_matmul_forward(y, act_[s], expert_weights(ctx, proj_), offsets, width_, C_);
}

void MoeMlp::experts_backward(const LayerContext& ctx, int slot, const std::vector<int>& offsets,
                              const TensorView& rows, const TensorView& dy, const TensorView& dx, GradientSink& sink) {
  Backend& be = ctx.backend;
  const MoeScratch& sc = ctx.scratch.moe;
  const size_t s = size_t(slot), F = 2 * size_t(width_), C = size_t(C_), W = size_t(width_);
  const int R = offsets.back();
  // The input gradients are grouped products over every expert's rows, as the forward's; the
  // weight gradients go expert by expert from the last (descending flat order: proj, then fc),
  // because a sink hands out a few buckets of gradients at a time. An expert that got no token
  // still acquires its gradients, since a sink waits for every range of a bucket. dx may be dy:
  // every read of dy comes before dx is written.
  be.grouped_matmul_backward_input(sc.dact, dy, expert_weights(ctx, proj_), offsets, width_, C_);
  if (R > 0) be.swiglu_backward(sc.dpre, pre_[s], sc.dact, R, width_);
  for (size_t e = fc_.size(); e-- > 0;) {
    const size_t r0 = size_t(offsets[e]), n = size_t(offsets[e + 1]) - r0;
    {
      AcquiredGrads g(sink, proj_[e]);
      if (n > 0)
        be.matmul_backward_weight_rows(g.w(), dy.slice(r0 * C, n * C), act_[s].slice(r0 * W, n * W), int(n), width_,
                                       C_, 0, C_);
      g.release();
    }
    AcquiredGrads g(sink, fc_[e]);
    if (n > 0)
      be.matmul_backward_weight_rows(g.w(), sc.dpre.slice(r0 * F, n * F), rows.slice(r0 * C, n * C), int(n), C_,
                                     int(F), 0, int(F));
    g.release();
  }
  be.grouped_matmul_backward_input(dx, sc.dpre, expert_weights(ctx, fc_), offsets, C_, int(F));
}

std::vector<TensorView> MoeMlp::expert_weights(const LayerContext& ctx, const std::vector<WeightAndBias>& layer) const {
  std::vector<TensorView> weights;
  for (const WeightAndBias& p : layer) {
    // A weight stored apart is turned back into one shared scratch, which cannot hold every
    // expert at once (and MoE models refuse the adapters that store weights so).
    FEAST_CHECK(!p.apart, "an expert's weight " << p.weight->spec->name << " is stored apart from the parameters");
    weights.push_back(weight_of(ctx, p));
  }
  return weights;
}

void MoeMlp::exchange(const ExpertExchange& x, const TensorView& from, const TensorView& to, bool outward) {
  std::vector<size_t> out(x.send_rows), in(x.recv_rows);
  if (!outward) std::swap(out, in);
  for (size_t& c : out) c *= size_t(C_);
  for (size_t& c : in) c *= size_t(C_);
  Timer timer;
  recorder_.expert_group()->alltoallv(from.data, out, to.data, in, from.dtype)->wait();
  recorder_.add_exchange_seconds(timer.seconds());
}

}  // namespace feast
