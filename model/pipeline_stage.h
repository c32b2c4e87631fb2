// One rank's pipeline stage as the executor and the training loop see it, whatever the model:
// forward and backward of one micro-batch in an activation slot, its parameters and where their
// gradients go, and the activations it exchanges with its neighbour stages. The decoder stage
// (model/decoder_stage.h) is the one implementation; any model that fits this shape runs under
// every schedule, ZeRO stage and layout.
// Legend: B micro-batch, T sequence, C the activation width exchanged between stages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "backend/backend.h"
#include "model/context_parallel.h"
#include "model/gradient_sink.h"
#include "model/parameter_residency.h"
#include "model/parameter_units.h"
#include "model/parameters.h"

namespace feast {

// A range of the flat buffer that backward acquires from the sink as one piece.
struct GradRange {
  size_t begin = 0, end = 0;
  int uses = 1;             // acquisitions per backward (2: a tied head and embedding on one stage)
  bool standalone = false;  // a chunk of a vocabulary-sized tensor: never merged into a bucket
  bool tied = false;        // shared with another stage: summed over the embedding group
  // The model chunk whose backward writes it (interleaved 1F1B; 0 otherwise). A chunk's
  // backwards come at their own times, so a bucket never spans two chunks' ranges.
  int chunk = 0;
  // A mixture of experts' expert tensor: under expert parallelism its gradient is summed over
  // the ranks holding the same experts only, so a bucket never mixes it with other tensors.
  bool expert = false;
};

// A stage's activation memory: what each slot keeps for its backward, the buffers its
// recomputed blocks share, and the scratch its layers share.
struct ActivationBytes {
  size_t per_slot = 0;
  int slots = 0;
  size_t recompute = 0;
  size_t scratch = 0;
  size_t total() const { return per_slot * size_t(slots) + recompute + scratch; }
};

class QuantizedBase;

// What a stage's mixture-of-experts blocks saw over a step (model/layers/moe.h).
struct MoeStepTotals {
  double aux_loss = 0, z_loss = 0;  // each the mean over the step's micro-batches this stage finished
  std::vector<double> load;         // (its MoE blocks, experts): choices per expert
  double dropped = 0;               // choices past an expert's capacity
};

// Where a micro-batch sits in the run: the training step and the step's global index of its
// first sequence (step -1: unknown, as in an evaluation). LoRA dropout's masks are drawn from it,
// so every layout drops the same elements of the same rows.
struct MicroBatchPlace {
  int64_t step = -1;
  int64_t first_sequence = 0;
  // Its share of the step's mixture-of-experts auxiliary losses, which are means over the step's
  // micro-batches (1 / their number over all data-parallel ranks).
  double moe_weight = 1;
};

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;

  virtual Backend& backend() = 0;
  // The trainable tensors (the whole model's, or LoRA's adapters): what gets gradients, optimizer
  // state and checkpoints.
  virtual const LocalTable& table() const = 0;
  // The compute parameters: the stage's flat buffer in table order, in compute_dtype().
  virtual TensorView parameters() = 0;
  // LoRA's frozen base model (model/lora.h): its table and values, in compute_dtype(); null and
  // empty without LoRA.
  virtual const LocalTable* frozen_table() const { return nullptr; }
  virtual TensorView frozen_parameters() { return {}; }
  // QLoRA: the base's block products' weights, stored apart from the frozen buffer in bfloat16 or
  // 4-bit NormalFloat (model/quantized_base.h) and loaded through it; null otherwise.
  virtual QuantizedBase* stored_apart() { return nullptr; }
  // The frozen base's device bytes: its buffer and what is stored apart.
  virtual size_t frozen_bytes() { return frozen_parameters().bytes(); }
  // Activation slots (micro-batches whose activations it can hold at once).
  virtual int slots() const = 0;
  virtual ActivationBytes activation_bytes() const = 0;

  // Where backward adds parameter gradients; set before the first backward.
  virtual void set_gradient_sink(GradientSink* sink) = 0;
  // Vocabulary-sized tensors' gradients are acquired in chunks of whole rows of at most
  // max_elems elements (a ZeRO-2 bucket should not have to hold all of one). Call before
  // gradient_ranges(); the default is one chunk.
  virtual void set_gradient_range_limit(size_t max_elems) = 0;
  // Every range backward acquires: disjoint, together covering the flat buffer.
  virtual std::vector<GradRange> gradient_ranges() const = 0;

  // The units of the flat buffer that ZeRO 3 brings in one at a time, and what tells the stage
  // they are in. Without a residency (the default) every parameter is always whole.
  virtual const ParameterUnits& parameter_units() const = 0;
  virtual void set_parameter_residency(ParameterResidency* residency) = 0;

  // Pipeline I/O, (B, T, C) activations in compute_dtype(): the input a non-first stage
  // receives into before forward(slot); the output a non-last stage sends after it; the output
  // gradient a non-last stage receives before backward (one buffer: backward consumes it at
  // once) and the input gradient a non-first stage sends after backward.
  virtual TensorView input(int slot) = 0;
  virtual TensorView output(int slot) = 0;
  virtual TensorView output_grad() = 0;
  virtual TensorView input_grad() = 0;
  // A non-first stage that splits its backward: where an activation is received before its
  // forward copies it into input(slot) (a weight pass may still read the slot it belongs to
  // while it arrives). Empty otherwise.
  virtual TensorView arrival() = 0;
  // Elements of one micro-batch's activation (B * T * C).
  virtual size_t activation_numel(int B, int T) const = 0;

  // Whether forward(slot, ...) reads the micro-batch's tokens or targets (the first stage's
  // embedding, the last stage's loss; under interleaved 1F1B only their chunks'): the data is
  // loaded for it alone.
  virtual bool reads_batch(int slot) const = 0;
  // Forward of one micro-batch into `slot`; tokens and targets (B, T) are host memory. The
  // first stage reads tokens; the last reads targets, computes the loss and, when
  // loss_scale != 0, already turns its logits into their gradient for d(loss_scale * sum of
  // token losses). Returns the micro-batch's mean token loss on the last stage, 0 elsewhere.
  // A training forward (loss_scale != 0) at a known place draws LoRA dropout's masks from it.
  // positions (B, T), host memory: under document masks each token's place in its document
  // (data/sampler.h), which every stage reads; null otherwise.
  virtual float forward(int slot, const int32_t* tokens, const int32_t* targets, const int32_t* positions, int B,
                        int T, float loss_scale, const MicroBatchPlace& place) = 0;
  // Backward of the micro-batch in `slot` (forwarded with a non-zero loss_scale). Non-last
  // stages first receive the output gradient into output_grad(). Parameter gradients are added
  // through the sink; non-first stages leave the input gradient in input_grad().
  virtual void backward(int slot, int B, int T) = 0;
  // Its two halves, for a schedule that splits them (zero-bubble), on a stage built to split
  // them: the input gradient (left in input_grad() as backward leaves it; the stage keeps the
  // output gradients the second half reads), and later the parameter gradients through the
  // sink, in the order backward adds them. No gradient is added by the first half.
  virtual void backward_input(int slot, int B, int T) = 0;
  virtual void backward_weight(int slot, int B, int T) = 0;

  // Seconds spent in tensor-parallel communication since the last call (for the time split).
  virtual double take_tp_comm_seconds() = 0;
  // What context parallelism's attention ring moved and waited for since the last call.
  virtual RingTraffic take_ring_traffic() = 0;
  // Seconds spent in expert parallelism's all-to-all exchanges since the last call.
  virtual double take_ep_comm_seconds() { return 0; }
  // A mixture-of-experts model's step since the last call, as this stage saw it
  // (MoeRecorder::StepTotals: the auxiliary losses, the choices per expert of its blocks, the
  // dropped choices); empty for a dense model.
  virtual MoeStepTotals take_moe_step() { return {}; }
};

}  // namespace feast
