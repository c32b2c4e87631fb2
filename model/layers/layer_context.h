// What the decoder's layers share: the backend, the tensor-parallel group and the stage's
// scratch buffers (used by one layer at a time, so one set serves them all), plus the two
// helpers every layer with parameters uses: the views of a weight and its bias, and acquiring
// their gradients from the sink as one range.
// Legend: N = B*T rows, C channels, Wl this rank's QKV width, Cq = NHl hs its attention output
// width, Il its MLP width, Fl its MLP input width (Il, or 2 Il for SwiGLU's gate and up).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "backend/backend.h"
#include "model/gradient_sink.h"
#include "model/lora.h"
#include "model/parameters.h"
#include "model/quantized_base.h"
#include "model/context_parallel.h"
#include "model/tensor_parallel.h"

namespace feast {

// A mixture-of-experts block's buffers (model/layers/moe.h), shared by the stage's MoE blocks.
// Legend: N tokens, E experts, k choices, M rows routed (at most N k), Il an expert's width here.
struct MoeScratch {
  TensorView logits;       // (N, E): the router's logits, then their gradient
  TensorView prob_sum;     // (E) float32: the router's probabilities summed over tokens
  TensorView rows;         // (M, C): the tokens gathered expert by expert
  TensorView drows;        // (M, C): d loss / d the experts' outputs, then / d their inputs
  TensorView dact, dpre;   // (M, Il), (M, 2 Il)
  TensorView dweight;      // (N, k) float32: d loss / d the router's weights of the choices
  TensorView dprob;        // (E) float32: the load-balancing loss's d loss / d probabilities
  TensorView part;         // (N, C): a part of the input gradient before it is added
  TensorView dshared;      // (N, C): d loss / d the shared experts' output
  TensorView dgate;        // (N) float32: d loss / d the shared experts' gate
  TensorView gate_logits;  // (N): the gate's logit, then its gradient
  // Expert parallelism (R: the rows this rank's experts may take, ep N k): rows on their way to
  // and from the experts' ranks, and in the experts' order. dact and dpre are then R rows.
  TensorView exchange_a, exchange_b;  // (R, C) each
};

struct StageScratch {
  // tmp and dres hold a sequence-parallel region's rows (N/tp under sequence parallelism).
  TensorView tmp;        // (N, C): a row-parallel layer's output in the forward; d(norm output) in the backward
  TensorView dres;       // (N, C): d loss / d residual stream, carried down the blocks
  TensorView dqkv;       // (N, Wl); empty with a split backward (the attention keeps its own per slot)
  TensorView dy;         // (N, Cq): d attention output
  TensorView dbig;       // (N, Fl): d MLP pre-activation
  TensorView dact;       // (N, Il): d MLP activation (SwiGLU; GELU works in place in dbig)
  TensorView ce_max;     // (N): the loss's row maxima
  TensorView ce_partials;  // (2, N): sums of exponentials and target logits, reduced together
  TensorView attention_workspace;
  // Sequence parallelism only (model/tensor_parallel.h), each (N, C): a sequence-parallel
  // region's rows gathered from every rank (a column-parallel layer's input, a row-parallel
  // layer's output gradient), and a product's partial sum before its reduce-scatter (a
  // row-parallel layer's output, a column-parallel layer's input gradient); and (2C) float32,
  // a norm's parameter gradients of one micro-batch, summed over the group before they are added
  // (also where a norm that needs no parameter gradients, split backward's input half or LoRA's
  // frozen base, drops them).
  TensorView gathered, partial, norm_grads;
  // A split backward only, (C) zeros in the compute dtype: what a norm's weight pass hands the
  // backend as the weight. The weight gradient does not read the weight; only the input
  // gradient, which that pass discards, does, so the pass needs no parameter resident (ZeRO 3).
  TensorView norm_weight_stand_in;
  // Context parallelism only: the attention ring's buffers.
  RingScratch ring;
  // LoRA only: an adapter's (N, r) h = scale · x A^T and its gradient (compute dtype, all N rows),
  // and (r, widest product) float32 for a replicated adapter matrix's partial gradient, summed
  // over the tensor-parallel group before it is added.
  TensorView lora_h, lora_dh, lora_grads;
  // LoRA dropout: an adapter's dropped input (N, in) and its gradient.
  TensorView lora_dropped, lora_dropped_grad;
  // A base stored apart (QLoRA, model/quantized_base.h): the product's weight turned back into
  // the compute dtype, as large as the stage's largest such weight.
  TensorView dequantized;
  // Mixture-of-experts blocks only.
  MoeScratch moe;
};

// Where a layer's tensors live: a flat buffer and its table. A frozen source (LoRA's base model)
// gets no gradients: its layers compute input gradients only; its block products' weights may be
// stored apart (`apart`, QLoRA), the rest in the buffer.
struct ParamSource {
  const LocalTable* table = nullptr;
  TensorView values;
  bool frozen = false;
  const QuantizedBase* apart = nullptr;
  // The local tensor `name`, in the table or stored apart.
  const LocalParam& at(const std::string& name) const;
};

// What a layer is built from: the base model's tensors and, under LoRA, the adapters'.
struct LayerParams {
  const ModelConfig& config;
  ParamSource base;
  ParamSource adapters;  // table null without LoRA
  LoraSpec lora;
  bool has_adapters() const { return adapters.table != nullptr; }
};

// LoRA dropout while training a micro-batch (model/lora.h): p > 0, and where the micro-batch sits
// in the run, which its masks are drawn from.
struct LoraDropout {
  float p = 0;
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t first_sequence = 0;  // the step's global index of the micro-batch's first sequence
  int T = 1;                   // tokens per sequence
  bool active() const { return p > 0; }
};

struct LayerContext {
  Backend& backend;
  TensorParallel& tp;
  ContextParallel& cp;
  const StageScratch& scratch;
  // Under document masks (data.document_mask): the micro-batch's int32 (B T) positions of each
  // token within its document (AttentionShape::positions); empty otherwise.
  TensorView positions = {};
  // Training a micro-batch under LoRA dropout; inactive otherwise (evaluation, no dropout).
  LoraDropout dropout = {};
};

// The two moves of tensor parallelism on a micro-batch's (N, C) activations, chosen here for
// every layer between plain tensor parallelism and sequence parallelism (model/tensor_parallel.h).
// All N rows of `rows`: itself, or under sequence parallelism every rank's N/tp rows gathered
// into the scratch (a column-parallel layer's input, a row-parallel layer's output gradient).
TensorView all_rows(const LayerContext& ctx, const TensorView& rows, int N, int C);
// Where a product is computed whose sum over the group lands in `out`: out itself, or under
// sequence parallelism the scratch's (N, C) partial sums.
TensorView partial_sums(const LayerContext& ctx, const TensorView& out);
// That sum (partial from partial_sums(ctx, out)): in place over all N rows, or under sequence
// parallelism reduce-scattered into out's N/tp rows.
void sum_partials(const LayerContext& ctx, const TensorView& partial, const TensorView& out, int N, int C);

// A weight and its optional bias, adjacent in the flat buffer: their parameter views and the
// one gradient range they form.
struct WeightAndBias {
  const LocalParam* weight = nullptr;
  const LocalParam* bias = nullptr;
  TensorView w, b;  // empty b without a bias; empty w when the weight is stored apart
  FlatRange range;
  bool frozen = false;  // no gradients (range is then of no buffer a sink knows)
  const QuantizedBase* apart = nullptr;  // where the weight is stored, when not in the buffer
};

// The weight in the compute dtype: its view, or the weight stored apart turned back into the
// scratch (valid until the next product's weight is).
TensorView weight_of(const LayerContext& ctx, const WeightAndBias& p);

// The tensors `name`.weight and, when has_bias, `name`.bias of this stage; throws when they are
// missing or not adjacent.
WeightAndBias weight_and_bias(const ParamSource& source, const std::string& name, bool has_bias);

// Gradients of one WeightAndBias, acquired from the sink and handed back by release()
// (explicitly, not in a destructor: a ZeRO-2 release may wait and throw).
class AcquiredGrads {
 public:
  AcquiredGrads(GradientSink& sink, const WeightAndBias& p);
  const TensorView& w() const { return w_; }
  const TensorView& b() const { return b_; }
  const TensorView& all() const { return all_; }  // weight then bias
  void release() { sink_.release(range_.begin, range_.end); }

 private:
  GradientSink& sink_;
  FlatRange range_;
  TensorView all_, w_, b_;
};

}  // namespace feast
