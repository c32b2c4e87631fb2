// The one PipelineStage implementation: a decoder-only transformer of any family
// (model/architecture.h), assembled from parts: the token embedding (first stage), a range of
// blocks, the final norm, the vocab-parallel head and its loss (last stage), each on this
// rank's tensor-parallel slice. It owns the flat parameter buffer, the rotary tables, and one
// set of activations per pipeline slot, all sized once: a step never allocates.
// Legend: B batch, T time, C channels, N = B*T, Vl this rank's vocabulary rows.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "model/architecture.h"
#include "model/layers/activation_memory.h"
#include "model/layers/block.h"
#include "model/layers/embedding.h"
#include "model/layers/lm_head.h"
#include "model/lora.h"
#include "model/pipeline_stage.h"
#include "model/quantized_base.h"
#include "model/stage_spec.h"

namespace feast {

// The largest micro-batch a stage is built for, how many it holds at once, and what its blocks
// recompute rather than keep: the first recompute_layers blocks of the stage (0: every block).
struct StageShape {
  // slots: per model chunk (StageSpec::chunks); the stage holds slots × chunks in all.
  int max_batch = 1, max_seq = 1, slots = 1;
  Recompute recompute = Recompute::kNone;
  int recompute_layers = 0;
  // ZeRO 3: the flat parameter buffer as reserved pages (Backend::reserve), which a residency
  // commits and gives back block by block.
  bool reserved_parameters = false;
  // parallel.sequence_parallel (model/tensor_parallel.h): the regions between the
  // tensor-parallel products hold 1/tp of each micro-batch's rows, and so do the activations
  // passed between pipeline stages.
  bool sequence_parallel = false;
  // The zero-bubble schedule: backward_input and backward_weight, with the output gradients
  // kept per slot between them (no recomputation).
  bool split_backward = false;
  // parallel.cp (model/context_parallel.h): this rank is cp_rank of cp sharing every sequence;
  // max_seq and each micro-batch's T count its own tokens (the whole sequence's / cp).
  int cp = 1, cp_rank = 0;
  // data.document_mask: every stage reads each micro-batch's positions of its tokens within
  // their documents (AttentionShape::positions), which the data loader derives.
  bool document_masks = false;
};

class DecoderStage final : public PipelineStage {
 public:
  // tp_comm: the tensor-parallel group (null when spec.tp == 1); cp_comm: the context-parallel
  // group (null when shape.cp == 1). Throws ConfigError when tp does not divide the heads or
  // key/value heads. With lora.enabled() the model's tensors are frozen (frozen_table(), no
  // gradients) and the trainable tensors are the adapters (model/lora.h).
  DecoderStage(const ModelConfig& config, const StageSpec& spec, const StageShape& shape, Backend& backend,
               Communicator* tp_comm, Communicator* cp_comm = nullptr, const LoraSpec& lora = LoraSpec{});
  DecoderStage(const DecoderStage&) = delete;
  DecoderStage& operator=(const DecoderStage&) = delete;

  Backend& backend() override { return backend_; }
  const LocalTable& table() const override { return table_; }
  TensorView parameters() override { return params_.view(); }
  const LocalTable* frozen_table() const override { return frozen_table_ ? &*frozen_table_ : nullptr; }
  TensorView frozen_parameters() override { return frozen_params_.view(); }
  QuantizedBase* stored_apart() override { return apart_.get(); }
  size_t frozen_bytes() override;
  // Slot j of chunk c is slot c·shape.slots + j: each chunk's blocks keep shape.slots
  // micro-batches, and the executor addresses a chunk through its slots.
  int slots() const override { return shape_.slots * chunks(); }
  ActivationBytes activation_bytes() const override;

  void set_gradient_sink(GradientSink* sink) override { sink_ = sink; }
  void set_gradient_range_limit(size_t max_elems) override;
  std::vector<GradRange> gradient_ranges() const override;
  const ParameterUnits& parameter_units() const override { return units_; }
  void set_parameter_residency(ParameterResidency* residency) override { residency_ = residency; }

  TensorView input(int slot) override { return input_[size_t(slot)]; }
  TensorView output(int slot) override;
  TensorView output_grad() override { return scratch_.dres; }
  TensorView input_grad() override { return scratch_.dres; }
  TensorView arrival() override { return arrival_; }
  size_t activation_numel(int B, int T) const override {
    return size_t(tp_.local_rows(B * T)) * size_t(config_.n_embd);
  }

  bool reads_batch(int slot) const override { return document_masks() || embeds(slot) || heads(slot); }
  float forward(int slot, const int32_t* tokens, const int32_t* targets, const int32_t* positions, int B, int T,
                float loss_scale, const MicroBatchPlace& place) override;
  void backward(int slot, int B, int T) override;
  void backward_input(int slot, int B, int T) override;
  void backward_weight(int slot, int B, int T) override;
  double take_tp_comm_seconds() override { return tp_.take_seconds(); }
  MoeStepTotals take_moe_step() override { return moe_ ? moe_->take_step() : MoeStepTotals{}; }
  double take_ep_comm_seconds() override { return moe_ ? moe_->take_exchange_seconds() : 0.0; }
  // Expert parallelism (StageSpec::ep > 1): the group of the ep ranks sharing the experts, which the
  // MoE blocks' all-to-all exchanges run on (model/layers/moe.h).
  void set_expert_group(Communicator* group) {
    if (moe_) moe_->set_expert_group(group);
  }
  // A mixture-of-experts model over more than one pipeline stage: the load-balancing loss of a
  // micro-batch needs every block's counts of choices (MoeRecorder). Its sums travel with the
  // micro-batch, forward stage by stage, and the whole model's come back with its gradients,
  // over `pipeline` (host memory: an MPI group of this rank's pipeline, stage i its rank i),
  // in the schedule's order of micro-batches (1F1B or GPipe, the same order on every stage).
  void set_moe_pipeline(Communicator* pipeline) { moe_pp_ = pipeline; }
  RingTraffic take_ring_traffic() override { return cp_.take_traffic(); }

  // This rank's (N, Vl) logits of `slot` after a forward with loss_scale == 0 (tests).
  const TensorView& logits(int slot) const { return head_->logits(slot); }

 private:
  LayerContext context() { return {backend_, tp_, cp_, scratch_}; }
  // The context of stage slot `slot`'s micro-batch: with its document positions, and LoRA
  // dropout while it trains, if any.
  LayerContext context(int slot) {
    LayerContext ctx = context();
    if (document_masks()) ctx.positions = positions_[size_t(slot)];
    const SlotPlace& at = places_[size_t(slot)];
    if (dropout_ > 0 && at.place.step >= 0)
      ctx.dropout = {dropout_, dropout_seed_, at.place.step, at.place.first_sequence, at.T};
    return ctx;
  }
  bool document_masks() const { return shape_.document_masks; }
  int chunks() const { return int(spec_.chunks.size()); }
  // A stage slot's chunk, and its slot within the chunk (what its blocks, embedding and head use).
  int chunk_of(int slot) const { return slot / shape_.slots; }
  int slot_in_chunk(int slot) const { return slot % shape_.slots; }
  // The chunk's blocks: [begin, end) in blocks_.
  int chunk_begin(int chunk) const { return chunk_begin_[size_t(chunk)]; }
  int chunk_end(int chunk) const { return chunk_begin_[size_t(chunk) + 1]; }
  bool embeds(int slot) const { return embedding_ && chunk_of(slot) == 0; }
  bool heads(int slot) const { return head_ && chunk_of(slot) == chunks() - 1; }
  // The output of the chunk's last block for `slot` (its input when it has no blocks).
  TensorView chunk_output(int slot);
  void check_micro_batch(int slot, int B, int T) const;
  // backward's walk over the head, the final norm and the blocks (units held as it goes): whole,
  // or only the input gradients (backward_input). Leaves d loss / d (the stage's input) in dres.
  void backward_walk(int slot, int B, int T, bool whole);
  // The final norm's output of `slot` as the head reads it: all N rows, gathered into the
  // scratch under sequence parallelism (again in the backward, rather than kept per slot).
  TensorView head_input(int slot, int N);  // slot: within the last chunk

  ModelConfig config_;
  DecoderArch arch_;
  StageSpec spec_;
  StageShape shape_;
  Backend& backend_;
  TensorParallel tp_;
  ContextParallel cp_;
  ParamTable logical_;  // the trainable tensors: the model's, or LoRA's adapters
  LocalTable table_;
  // The base's block weights stored apart (QLoRA: lora.base_dtype); null otherwise. Built before
  // frozen_logical_, which then leaves them out.
  std::unique_ptr<QuantizedBase> apart_;
  ParamTable frozen_logical_;  // LoRA: the model's (less what apart_ stores); empty otherwise
  std::optional<LocalTable> frozen_table_;
  ParameterUnits units_;
  Tensor params_, frozen_params_;
  // (maxT, hs/2) float32, rotary families only; under context parallelism the rows of this
  // rank's max_seq tokens' positions.
  Tensor rope_cos_, rope_sin_;
  ActivationMemory activations_;
  GradientSink* sink_ = nullptr;
  ParameterResidency* residency_ = nullptr;
  // With a residency: the walk's step `step` is needed now (and `next` soon, if >= 0); done with it.
  void hold_step(int step, int next);
  void let_go_step(int step);
  std::unique_ptr<TokenEmbedding> embedding_;  // first stage
  std::vector<DecoderBlock> blocks_;
  std::vector<int> chunk_begin_;  // per chunk, the index of its first block in blocks_; then blocks_.size()
  std::unique_ptr<Norm> final_norm_;           // last stage
  std::unique_ptr<LmHead> head_;               // last stage
  // input_: per stage slot (every chunk's), (N, C); tokens_ and targets_ per slot of a chunk: (N)
  // first stage, (N) last stage.
  std::vector<TensorView> input_, tokens_, targets_;
  std::vector<TensorView> input_grad_kept_;  // per slot (N, C), first stage, split backward: the embedding's
  // LoRA dropout's probability (0: none) and seed, and each stage slot's micro-batch place (step
  // -1: not training).
  float dropout_ = 0;
  uint64_t dropout_seed_ = 0;
  struct SlotPlace {
    MicroBatchPlace place;
    int T = 1;  // its tokens per sequence
  };
  std::vector<SlotPlace> places_;
  // Document masks: per stage slot (every chunk's), (N) int32 positions within documents.
  std::vector<TensorView> positions_;
  // Mixture of experts: what the blocks record of each micro-batch; the pipeline their sums
  // travel over (null: one stage), and per slot the sums being sent and their sends.
  std::unique_ptr<MoeRecorder> moe_;
  Communicator* moe_pp_ = nullptr;
  std::vector<std::vector<double>> moe_outgoing_;
  std::vector<WorkHandle> moe_sends_;
  // The pipeline's sums of `slot`'s micro-batch: received from the previous stage before the
  // forward, sent on after it; the whole model's received from the next stage before the
  // backward, sent back after it.
  void moe_receive(int slot, bool forward);
  void moe_send(int slot, bool forward);
  std::vector<Tensor> scratch_tensors_;
  StageScratch scratch_;
  TensorView arrival_;  // in scratch_tensors_: a non-first stage's, split backward
};

// Copies a stage's parameters from float32 host values: each local tensor initialised from the
// seed (init_local_parameter), so every layout starts from the same model.
void initialize_parameters(PipelineStage& stage, uint64_t seed);
// One local tensor's values as float32 on the host, and back (tests, checkpoints).
std::vector<float> read_parameter(PipelineStage& stage, const LocalParam& p);
void write_parameter(PipelineStage& stage, const LocalParam& p, const std::vector<float>& values);

}  // namespace feast
