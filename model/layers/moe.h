// A mixture-of-experts block's feed-forward part on this rank (Mixtral, Qwen2-MoE): a router, a
// (E, C) linear whose softmax over the E experts picks each token's top k; the experts, SwiGLU
// MLPs each split over the tensor-parallel group like the dense MLP (fc's gate and up rows,
// proj's input columns); and optionally shared experts every token passes through (a dense Mlp,
// under Qwen2-MoE's sigmoid gate). Dropless by default: the tokens are gathered expert by expert
// (model/layers/moe_routing.h), each expert runs its two products over its own rows, and the
// outputs are combined back into token order weighted by the router.
//
// Tensor parallelism: the router and the shared experts' gate are replicated and computed alike
// on every rank of the group (their input is); each rank computes its slice of every expert, and
// the partial outputs are summed once, after the combine. In the backward the combine's weight
// gradient (N k floats) is summed over the group before the router's backward, and the experts'
// partial input gradients once after they are gathered back.
//
// Expert parallelism (parallel.ep): the rank holds only its ep rank's experts (the parameter
// table gives it no others: StageSpec::holds_expert); each block sends its tokens' rows to their
// experts' ranks and takes them back (an all-to-all with variable counts, forward and backward).
//
// The auxiliary losses (model.moe.aux_loss_coef, z_loss_coef) are those transformers computes:
// the load-balancing loss over every MoE block of the model and every token of a micro-batch at
// once, so its gradient with respect to any block's router probabilities needs every block's
// counts of choices. The stage's blocks add their counts and probabilities into a MoeRecorder,
// which gives each block's backward the gradient (MoeRecorder::dprob) once the whole model's
// counts are known. Legend: N tokens, C channels, E experts, k choices per token, M rows routed,
// Il this rank's expert width.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/layers/activation_memory.h"
#include "model/layers/layer_context.h"
#include "model/layers/mlp.h"
#include "model/layers/moe_routing.h"
#include "model/pipeline_stage.h"

namespace feast {

// What a stage's MoE blocks record of each micro-batch in flight (per activation slot) and of
// the step (the metrics).
class MoeRecorder {
 public:
  // layers: the MoE blocks of the whole model (the load-balancing loss's rows are tokens x
  // layers); local_layers: this stage's; ep: the expert-parallel degree (parallel.ep).
  MoeRecorder(const MoeConfig& moe, int slots, int layers, int local_layers, int ep = 1);

  // Expert parallelism: the group of the ep ranks that share the experts (null when ep = 1),
  // which every block's all-to-all exchanges run on; the seconds they took since the last call.
  void set_expert_group(Communicator* group) { ep_group_ = group; }
  Communicator* expert_group() const { return ep_group_; }
  int ep() const { return ep_; }
  void add_exchange_seconds(double s) { exchange_seconds_ += s; }
  double take_exchange_seconds() {
    const double s = exchange_seconds_;
    exchange_seconds_ = 0;
    return s;
  }

  // The micro-batch of `slot` starts: its sums are cleared; weight is its share of the step's
  // auxiliary losses (1 / the step's micro-batches over all data-parallel ranks; 0 when it will
  // not run backward).
  void begin(int slot, int tokens, double weight);
  // A block's forward: its choices per expert (E), probabilities summed over tokens (E), the
  // sum over tokens of logsumexp(logits)^2, and the choices its capacity dropped.
  void add(int slot, int local_layer, const std::vector<int>& requested, const std::vector<float>& prob_sum,
           double lse_squares, int64_t dropped);
  // The sums the load-balancing loss needs, over this stage's blocks: (2E) the choices per expert
  // then the probabilities per expert; merged with another stage's (pipeline parallelism).
  std::vector<double> sums(int slot) const;
  void merge(int slot, const std::vector<double>& other);
  // The sums become `totals`, the whole model's (from the last stage).
  void set(int slot, const std::vector<double>& totals);
  // Every block's counts are in (sums(slot) covers the whole model): the gradient every block's
  // backward adds is set and, with record, the micro-batch's loss is counted in the step's.
  void finish(int slot, bool record);
  // d loss / d probs[n, e] of every block's router for the micro-batch, and the z-loss's scale
  // (Backend::moe_route_backward).
  const std::vector<float>& dprob(int slot) const { return slots_[size_t(slot)].dprob; }
  float z_scale(int slot) const { return slots_[size_t(slot)].z_scale; }

  // The step's totals since the last call: the load-balancing loss of the micro-batches this
  // stage finished (the last), the z-losses of its blocks, the choices per expert of each of its
  // blocks ((local_layers, E), dropped ones included) and the choices dropped.
  using StepTotals = MoeStepTotals;
  StepTotals take_step();

 private:
  struct Slot {
    std::vector<double> requested, prob_sum;
    int tokens = 0;
    double weight = 0;
    std::vector<float> dprob;
    float z_scale = 0;
  };
  MoeConfig moe_;
  int layers_, local_layers_;
  int ep_;
  Communicator* ep_group_ = nullptr;
  double exchange_seconds_ = 0;
  std::vector<Slot> slots_;
  StepTotals step_;
};

class MoeMlp {
 public:
  MoeMlp(const ModelConfig& config, const DecoderArch& arch, const LayerParams& params, int layer, int tp, size_t rows,
         ActivationMemory& memory, MoeRecorder& recorder, int local_layer);

  // out (N, C) = the block's feed-forward output for x (N, C), summed over the tensor-parallel
  // group; records the micro-batch's routing in the recorder.
  void forward(const LayerContext& ctx, int slot, const TensorView& x, const TensorView& out, int N);
  // dx (N, C) = d loss / d x from dout (N, C), the auxiliary losses' gradients included;
  // parameter gradients added through the sink (every expert this rank holds, with or without tokens).
  void backward(const LayerContext& ctx, int slot, const TensorView& dout, const TensorView& dx, const TensorView& x,
                int N, GradientSink& sink);

  std::vector<FlatRange> grad_ranges() const;

 private:
  // The forward products of this rank's experts over rows (R, C) held expert by expert at
  // `offsets` (one more than the experts): pre-activations, activations and outputs y (R, C) of
  // `slot`.
  void experts_forward(const LayerContext& ctx, int slot, const std::vector<int>& offsets, const TensorView& rows,
                       const TensorView& y);
  // Their backward from dy (R, C): dx (R, C) and the experts' gradients, acquired from the last.
  void experts_backward(const LayerContext& ctx, int slot, const std::vector<int>& offsets, const TensorView& rows,
                        const TensorView& dy, const TensorView& dx, GradientSink& sink);
  // The weights of this rank's experts of one projection (fc_ or proj_), as the grouped
  // products take them.
  std::vector<TensorView> expert_weights(const LayerContext& ctx, const std::vector<WeightAndBias>& layer) const;
  // rows (R, C) moved between this rank's order (expert by expert over all E experts) and the
  // experts' ranks, forward (to them: `from` M rows in, `to` R rows out, by ep rank) or back.
  void exchange(const ExpertExchange& x, const TensorView& from, const TensorView& to, bool outward);
  // The per-token weights of the shared experts' output: the gate of `slot`, or ones.
  TensorView shared_weight(int slot) const { return shared_gate_.weight ? gate_[size_t(slot)] : ones_.view(); }

  int C_, E_, k_, width_;  // width_: Il
  double capacity_factor_;
  bool renormalize_;
  int local_layer_;
  MoeRecorder& recorder_;
  WeightAndBias router_;
  std::vector<WeightAndBias> fc_, proj_;  // per expert this rank holds (under ep, its ep rank's share)
  std::unique_ptr<Mlp> shared_;
  WeightAndBias shared_gate_;             // empty weight without a gate
  // Per slot: the router's probabilities (N, E), logsumexp (N), choices (N, k) and their weights
  // (N, k); the routing tables (slot (N k), token (M)) and the plan on the host; the experts'
  // pre-activations (M, 2 Il), activations (M, Il) and outputs (M, C); the shared experts'
  // output (N, C) and their gate (N), if they have one.
  std::vector<TensorView> probs_, lse_, expert_, weight_, slot_, token_, pre_, act_, out_, shared_out_, gate_;
  std::vector<RoutingPlan> plans_;
  // Expert parallelism, per slot: the exchange, the rows this rank's experts took (R, C) in their
  // order, and the permutations between the received order (by ep rank) and theirs (R).
  std::vector<ExpertExchange> exchanges_;
  std::vector<TensorView> local_rows_, to_experts_, to_ranks_;
  // (N) int32 0 .. N-1 and float32 ones: the shared output's combine, and its weights without a gate.
  Tensor identity_, ones_;
};

}  // namespace feast
