// One rank's training job, built and checked: the layout plan, the data (opened and agreed on
// before any model memory is allocated), the process groups, the backend, this rank's pipeline
// stage, its gradient synchronisation, its shard of the optimizer and the pipeline executor; and
// the TrainingState they make up. step() runs one optimizer step of the whole job; validate()
// one evaluation. The training loop (train_loop.h) drives it, prints and writes metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "comm/communicator.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "backend/backend.h"
#include "model/pipeline_stage.h"
#include "parallel/data_parallel/grad_sync.h"
#include "optim/adamw.h"
#include "parallel/data_parallel/parameter_server.h"
#include "parallel/data_parallel/sharded_parameters.h"
#include "parallel/pipeline/pipeline_executor.h"
#include "comm/process_groups.h"
#include "config/config.h"
#include "config/validate.h"
#include "train/metrics/moe_report.h"
#include "train/training_state.h"

namespace feast {

// Where one rank's time went in one step (seconds).
struct StepTiming {
  double total = 0;
  StageTimes stage;      // forward/backward compute, tensor-parallel and pipeline communication
  double dp_comm = 0;    // gradient reductions, the embedding sum and the parameter all-gather
                         // (the part not hidden behind the backward); with a parameter server
                         // its pushes and pulls
  double optimizer = 0;  // norm, clipping and the AdamW update of this rank's shard
  ReductionTimes dp_reduce;  // the gradient reductions: how long they ran, and the part in dp_comm
  ReductionTimes dp_gather;  // ZeRO 3's gathers of units during the passes: the same figures
  OffloadTimes offload;      // offloaded: the host's update and its waits for gradients (in optimizer)
};

// Why a rank wants the job to stop after the current step; the ranks agree on it in the step's
// reduction, so all of them stop after the same step.
struct StopVote {
  bool interrupt = false;   // SIGINT (Ctrl-C)
  bool terminate = false;   // SIGTERM or SIGUSR1 (preemption, a job's time limit)
  bool time_limit = false;  // training.exit_after_minutes has passed
  bool any() const { return interrupt || terminate || time_limit; }
};

struct StepResult {
  double loss = 0;       // mean token loss of the global batch (the same on every rank)
  double grad_norm = 0;  // global gradient norm before clipping
  double lr = 0;
  bool skipped = false;  // the loss or norm was not finite and the update was skipped
  StopVote stop;         // what any rank voted (the same on every rank)
  StepTiming timing;     // this rank's
  std::optional<MoeStepReport> moe;  // a mixture-of-experts model's
};

// The bytes one rank holds for training, as the start-up report prints them.
struct MemoryBytes {
  double parameters = 0;   // this rank's stage and tensor-parallel slice
  double gradients = 0;    // full buffer, shard or buckets, by ZeRO stage
  double optimizer = 0;    // AdamW's master copy and moments of what this rank updates
  double activations = 0;  // the stage's activation slots and its recomputed blocks' shared set
  double workspace = 0;    // scratch the layers share (one layer runs at a time)
  double communication = 0;  // buffers that only carry traffic (bf16 wire copies, a server's receive buffer)
  double total() const { return parameters + gradients + optimizer + activations + workspace + communication; }
  // Of the activations: what one micro-batch in flight keeps for its backward (one slot).
  double activations_per_micro_batch = 0;
  // Host memory, not in total(): offloaded optimizer state and its gradient copy.
  double offloaded = 0;
  // A GPU allocator's high-water mark of everything on the device (workspaces included); 0 on
  // the CPU.
  double device_peak = 0;
};

class TrainingRun {
 public:
  // Collective over world, whose ranks have agreed on the config (agree_on_config: train() and
  // eval do); `plan` is what check_run (config/validate.h) made of it for this world. Throws
  // AgreedError for data every rank agrees is bad, before allocating the model.
  TrainingRun(const Config& config, const LayoutPlan& plan, std::unique_ptr<Communicator> world,
              RunPurpose purpose = RunPurpose::kTrain);
  ~TrainingRun();

  // Runs step state().step and advances the state. `vote` is this rank's wish to stop after it.
  // A non-finite loss or gradient norm skips the update while training.skip_nonfinite allows,
  // else throws AgreedError on every rank naming the step and the first rank that saw it.
  StepResult step(const StopVote& vote = {});
  // The mean validation loss per counted target over training.eval_batches batches of the
  // global batch size, or over every window of data.val once when eval_batches is 0 (the same
  // on every rank); nothing without validation data.
  std::optional<double> validate();
  // Validation windows that validate() scores.
  int64_t validation_windows() const;

  RunPurpose purpose() const { return purpose_; }
  // Collective: model.init_from's Hugging Face weights (this rank's slices) replace the
  // initialisation, and the optimizer's master copy takes them. A run that resumes a checkpoint
  // does not call it (start_from_checkpoint_or_import in train/checkpointing.h decides).
  void import_initial_weights();
  // LoRA: the adapters from lora.init_from's PEFT folder (after import_initial_weights, on a
  // fresh run). Every rank throws the same AgreedError when the folder does not fit.
  void import_initial_adapters();
  // LoRA: the imported base's fingerprint (weights_fingerprint) on world rank 0 of a training
  // run, for the checkpoints to name; empty otherwise.
  const std::string& base_fingerprint() const { return base_fingerprint_; }

  TrainingState& state() { return state_; }
  PipelineStage& stage() { return *stage_; }
  Communicator& world() { return *groups_.world; }
  const LayoutPlan& plan() const { return plan_; }
  // The values in use where the config leaves them to inference (dp, micro-batches, threads).
  const InferredValues& inferred() const { return inferred_; }
  // How many ranks on this rank's host may run on its CPUs, itself included (1 alone).
  int cpu_sharing_ranks() const { return cpu_sharing_ranks_; }
  // This rank's parameters, optimizer state and data-parallel share, for checkpoints, in host
  // float32. On a GPU these are views of a host copy taken by this call; after a checkpoint has
  // been read into them, rank_state_loaded() puts them in place on the device.
  RankState rank_state();
  // The same, to be written over by a checkpoint: under ZeRO 3 every block is held whole
  // until rank_state_loaded() gives back what this rank does not own.
  RankState rank_state_to_load();
  void rank_state_loaded();
  // ZeRO 3: every block's parameters gathered whole and kept (what reads every weight after
  // training: tests' hooks); nothing otherwise. The run's last step does it already.
  void gather_parameters();
  int64_t tokens_per_step() const;
  // This rank's memory, as reported at start: what is allocated (for ZeRO 3's parameters the
  // most a step can hold).
  MemoryBytes memory_bytes() const;
  // The same measured after steps: ZeRO 3's parameters at the most they held, and a GPU
  // allocator's high-water mark.
  MemoryBytes memory_high_water() const;
  // Every rank's memory_bytes(), by world rank (gathered once, at construction).
  const std::vector<MemoryBytes>& memory_of_ranks() const { return memory_of_ranks_; }
  // With a parameter server (parallel.dp_sync): the bytes this rank pushed to and pulled from
  // the other servers in the last step; zeros under all-reduce, whose traffic the collective
  // library's algorithm decides.
  DpTraffic dp_bytes_last_step() const;
  // What the same step moves through a dense parameter server (the comparison for
  // parallel.ps_sparse_embedding); zeros under all-reduce.
  DpTraffic dp_bytes_dense_step() const;
  // Each logical tensor's gradient norm after the last step (before clipping), in table order
  // with the tensor names; collective over the world. Tied copies count once.
  std::vector<std::pair<std::string, double>> gradient_norms_per_tensor();

 private:
  void open_data();
  // A GPU run's groups: NCCL or MPI with device buffers staged (parallel.backend), alike on every
  // rank (collective over the world); first the report of how the GPUs are linked. hosts[r]:
  // rank r's host.
  void connect_gpus(const std::vector<std::string>& hosts);
  // A step's loss or norm was not finite: skip its update or fail (see step()).
  void handle_nonfinite(const StepResult& r, bool mine_finite);
  void report_start();
  // The parameter server's start-up line: bytes per step, dense and sparse.
  void report_parameter_server();
  // Every token this rank's micro-batches of the current step read (the sparse parameter
  // server pulls the embedding rows they name).
  std::vector<int32_t> step_tokens() const;
  // The fill of whole sequences, cut to this rank's share of each under context parallelism.
  BatchFill context_share(BatchFill whole);
  // This rank's tokens of each sequence: training.seq_len / parallel.cp.
  int local_seq_len() const { return config_.training.seq_len / plan_.layout.cp(); }

  const Config& config_;
  RunPurpose purpose_;
  std::string base_fingerprint_;

  LayoutPlan plan_;
  RankCoord me_;
  bool owns_loss_ = false;  // reports the loss: the last stage's tensor-parallel rank 0
  std::optional<Dataset> train_data_, val_data_;
  int32_t document_eos_ = -1;  // data.document_mask's end-of-text id; -1: no document masks
  std::optional<TrainSampler> sampler_;
  std::optional<ValSampler> val_sampler_;
  std::optional<int64_t> val_counted_;  // targets validate() scores, counted at its first call
  std::vector<int32_t> whole_tokens_, whole_targets_;  // (B, seq_len): context_share's whole sequences
  ProcessGroups groups_;
  // A mixture-of-experts model over pipeline stages: this rank's pipeline as an MPI group, which
  // carries the load-balancing loss's sums (DecoderStage::set_moe_pipeline).
  std::unique_ptr<Communicator> moe_pipeline_;
  // parallel.ep > 1: the ranks sharing this rank's experts (DecoderStage::set_expert_group), and
  // the data-parallel ranks that hold the same experts as this one (GradientSync's `experts`).
  std::unique_ptr<Communicator> expert_group_;
  std::unique_ptr<Communicator> expert_replicas_;
  // A mixture of experts' step: this rank's part of the sums the step's reduction over the world
  // adds up (the stage's since the last call), and the report from those sums.
  std::vector<double> moe_step_sums();
  MoeStepReport moe_step_report(const double* sums) const;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> host_backend_;  // updates offloaded optimizer state next to a GPU
  std::unique_ptr<PipelineStage> stage_;
  std::unique_ptr<DataParallelSync> sync_;  // GradientSync, or the ParameterServer
  ParameterServer* ps_ = nullptr;           // sync_ when parallel.dp_sync = "parameter-server"
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<ShardedParameters> sharded_;  // ZeRO 3 (dp > 1): the blocks' parameters by shard
  std::unique_ptr<PipelineExecutor> executor_;
  InferredValues inferred_;
  int cpu_sharing_ranks_ = 1;
  std::vector<MemoryBytes> memory_of_ranks_;
  TrainingState state_;
  // The host copy rank_state() hands out when the state lives on a GPU: the parameters in
  // float32, then each optimizer tensor's master, exp_avg and exp_avg_sq.
  std::vector<float> host_params_;
  std::vector<std::vector<float>> host_optimizer_;
};

}  // namespace feast
