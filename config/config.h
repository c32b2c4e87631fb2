// The run's configuration: one TOML file (toml++) plus `--set section.key=value` overrides,
// parsed into typed structs with documented defaults (docs/config.md documents every key).
// Unknown keys, wrong types and out-of-range values are ConfigErrors that name the key, where
// it was set (file:line or --set) and, for a typo, the nearest valid key. Nothing is allocated
// before the config is valid.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/lora.h"
#include "model/model_config.h"

namespace feast {

struct ParallelConfig {
  int tp = 1;                 // tensor-parallel degree
  // Norms and residual sums hold 1/tp of each micro-batch's tokens (model/tensor_parallel.h).
  bool sequence_parallel = false;
  int pp = 1;                 // pipeline-parallel degree
  int dp = 0;                 // data-parallel degree; 0 = world size / (tp * pp * cp)
  // Context-parallel degree: cp ranks share each sequence, attention as a ring
  // (model/context_parallel.h).
  int cp = 1;
  // Expert-parallel degree: each mixture-of-experts block's experts divided over ep consecutive
  // data-parallel ranks, tokens sent to their experts' ranks by all-to-all (model/layers/moe.h).
  int ep = 1;
  std::string order = "tp-dp-pp";  // rank-numbering axes, innermost first
  int zero_stage = 1;         // 0 all-reduce, 1 shard optimizer state, 2 also gradients, 3 also parameters
  int micro_batch_size = 4;   // sequences per micro-batch on one rank
  int num_micro_batches = 1;  // micro-batches per step per data-parallel rank
  std::string schedule = "1f1b";  // pipeline schedule: "1f1b", "gpipe", "zero-bubble" or "interleaved-1f1b"
  int virtual_stages = 1;     // interleaved-1f1b: model chunks per pipeline stage
  double bucket_mb = 4.0;     // gradient-reduction bucket size in MiB
  std::vector<int> stage_layers;  // layers per pipeline stage; empty = as even as possible
  double timeout_s = 300;     // a collective or receive waiting longer ends the job (watchdog)
  // How data-parallel replicas combine gradients: "allreduce" (collectives, ZeRO by zero_stage)
  // or "parameter-server" (data-parallel rank r serves shard r: workers push gradients to the
  // servers and pull weights back; zero_stage must be 0).
  std::string dp_sync = "allreduce";
  // With a parameter server: the token embedding moves only the rows a batch touches.
  bool ps_sparse_embedding = false;
  // AdamW's master weights and moments in host memory, updated by host threads.
  bool offload_optimizer = false;
  // The communication library for GPU buffers: "auto" (NCCL on GPUs where it can be used, else
  // MPI), "nccl" or "mpi" (device buffers staged through host memory).
  std::string backend = "auto";
  // The dtype data-parallel gradients travel and are summed in: "fp32", or "bf16" (half the
  // bytes; micro-batches still accumulate in fp32).
  std::string grad_reduce_dtype = "fp32";
};

struct TrainingConfig {
  int64_t steps = 100;
  // Sequences per optimizer step over all ranks; 0 = dp * num_micro_batches * micro_batch_size.
  // When set, num_micro_batches is derived from it, so one config keeps the same global batch
  // at every layout.
  int64_t batch_size = 0;
  uint64_t seed = 1337;
  std::string device = "cpu";  // "cpu" or "cuda"
  std::string dtype = "auto";  // "auto" (fp32 on the CPU, bf16 on a GPU), "fp32" or "bf16"
  int seq_len = 64;            // tokens per sequence; <= model.max_seq_len
  double lr = 1e-3;            // peak learning rate
  double min_lr = 1e-4;        // floor reached at the end of the decay
  int64_t warmup_steps = 10;   // linear warm-up from lr/warmup_steps to lr
  std::string lr_schedule = "cosine";  // "cosine", "linear" or "constant" after warm-up
  double weight_decay = 0.1;   // decoupled (AdamW); matrices only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;      // max global gradient norm; 0 disables clipping
  int64_t eval_interval = 50;  // evaluate val_loss every N steps (and at the last); 0 = never
  int eval_batches = 8;        // validation batches of the global batch size per evaluation
  int threads = 0;             // OpenMP threads per rank; 0 = OMP_NUM_THREADS or this rank's share of its CPUs
  // Save a checkpoint after step N and exit 0; the LR schedule still follows `steps` (a run
  // continued later goes on as if never stopped). 0 = never.
  int64_t exit_at_step = 0;
  // Save and exit 0 at the end of the first step that starts past this wall time (job time
  // limits). 0 = never.
  double exit_after_minutes = 0;
  // Steps whose loss or gradient norm is not finite that may be skipped (no update) before the
  // run fails; 0 = the first one fails the run.
  int64_t skip_nonfinite = 0;
  // Activation recomputation: "none", "selective" (the attention core and the MLP activation
  // are recomputed in the backward) or "full" (each block keeps only its output and reruns its
  // forward); for the first recompute_layers blocks of each stage (0 = every block).
  std::string recompute = "none";
  int recompute_layers = 0;
};

struct DataConfig {
  std::string train;  // token shards: a file, a directory, or a glob such as "dir/train_*.bin"
  std::string val;    // same forms; empty = no validation
  // Document masks (data/sampler.h, AttentionShape::positions): attention and positions stay inside
  // each document (packed data's recorded samples, or else what end-of-text tokens end), and a
  // document's first token is not counted as a target.
  bool document_mask = false;
  int64_t eos_id = -1;  // that token; -1 = the eos_id the training data's meta.json records
};

struct CheckpointConfig {
  std::string dir;       // where checkpoints go; empty = <logging.dir>/checkpoints
  int64_t interval = 0;  // save every N steps (and after the last); 0 = only when stopping early
  int keep = 3;          // complete checkpoints to keep; older ones are deleted after a save
  // "auto": continue from the newest complete checkpoint in `dir` (falling back to older ones
  // when it is corrupt), or start fresh when there is none; "never": always start fresh; a
  // path: that checkpoint file (or the newest in that directory), which must load.
  std::string resume = "auto";
  // Write checkpoints on a thread of their own: a step waits only while its state is copied to
  // host memory (which needs that much memory, and MPI_THREAD_MULTIPLE).
  bool async = false;
};

// Fault injection for tests of recovery: at step `at_step` (when it is about to run), rank
// `kill_rank` kills itself with SIGKILL and rank `stall_rank` hangs. Only the first attempt of a
// job acts (FEAST_ATTEMPT unset or 1; scripts/run-resilient.sh counts attempts), so a restarted
// job runs through.
struct FaultConfig {
  int kill_rank = -1;  // -1 = none
  int stall_rank = -1;
  int64_t at_step = 0;
};

// LoRA fine-tuning (model/lora.h, docs/finetune.md): rank > 0 freezes the model and trains
// low-rank adapters on the named products.
struct LoraConfig {
  int rank = 0;  // 0 = no adapters: every weight trains
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets;  // empty = the family's default (Llama q, v; GPT-2 qkv)
  std::string init_from;             // a PEFT adapter folder whose A and B start the adapters
  // How the frozen base keeps its block products' weights: "auto" (the compute dtype), "bf16",
  // "nf4" (QLoRA; model/quantized_base.h); double_quant: nf4's scales in 8 bits too.
  std::string base_dtype = "auto";
  bool double_quant = false;
  bool enabled() const { return rank > 0; }
};

struct LoggingConfig {
  // The run directory (metrics.jsonl, train.log, ...); empty = a new one for each run,
  // runs/<config name>-<UTC date-time> (train/run_directory.h).
  std::string dir;
  int64_t interval = 1;              // print a progress line every N steps
  bool quiet = false;                // batch jobs: no per-step progress, only start, evaluations and the end
  bool verbose = false;              // the start-up report lists every rank (else a summary for many ranks)
  bool tensorboard = true;           // TensorBoard event files beside metrics.jsonl
  double peak_tflops = 0;            // MFU's peak per rank in TFLOP/s; 0 = known GPU's, or measured GEMM on the CPU
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  FaultConfig fault;
  LoraConfig lora;

  // Where each key got its value: "file.toml:12", "--set" or "default". Later checks (world
  // size, data paths) use it to point the user at the line to change.
  std::map<std::string, std::string> origin;
  std::string source;        // the config file ("" for none); names a fresh run directory
  std::string command_line;  // how the trainer was started, for the run directory
  std::string where(const std::string& key) const;

  // Micro-batches per step on each data-parallel rank: derived from training.batch_size when
  // it is set. Throws ConfigError when the global batch does not divide as configured.
  int micro_batches_per_rank(int dp) const;
};

// Parses `path` (may be empty: defaults only) and applies `overrides` ("section.key=value", the
// value in TOML syntax, with bare words taken as strings), then validates. Throws ConfigError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

// Parses TOML text directly (tests use it; `source_name` stands in for the file name).
Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides);

// A config saved by feast (a checkpoint's, a run directory's config.toml): it lists every
// [model] key, so model.init_from is kept as a value and its folder, which may be gone, is not
// read. Throws ConfigError.
Config parse_saved_config(const std::string& toml_text, const std::string& source_name);
// The same, leniently: nothing when there is no text or it does not parse (another tool's file,
// an older version's), for the comparisons that then have nothing to go by.
std::optional<Config> read_saved_config(const std::string& toml_text, const std::string& source_name);

// The adapters [lora] asks for (targets defaulted to the family's); disabled when rank = 0.
LoraSpec lora_spec(const Config& config);

// checkpoint.dir's default, <logging.dir>/checkpoints: derived here only.
std::string default_checkpoint_dir(const std::string& logging_dir);
// Settles logging.dir once the run directory is known (a fresh one when the config left it
// unset); checkpoint.dir follows it when the config left that unset too.
void settle_logging_dir(Config& config, const std::string& dir, const std::string& origin);
// checkpoint.dir, when the config leaves it unset, follows logging.dir once that is known.
void infer_checkpoint_dir(Config& config);
// Whether checkpoint.dir is the default one, inferred from logging.dir.
bool checkpoint_dir_is_default(const Config& config);

// The resolved config as TOML, printed at start and saved in the run directory.
std::string to_toml(const Config& config);

// What a run resolved where the config leaves values to inference (0 = not known here).
struct InferredValues {
  int world_size = 0;
  int dp = 0;             // data-parallel degree in use
  int micro_batches = 0;  // per step on each data-parallel rank
  int threads = 0;        // OpenMP threads per rank in use
  std::string threads_from;  // how threads were chosen ("OMP_NUM_THREADS", ...)
};

// `config` with parallel.dp, parallel.num_micro_batches, training.batch_size and training.threads
// set to the values in use where the config left them to inference, each marked in `origin`
// ("inferred: world size 8 / (tp 2 * pp 2)"), so that to_toml prints what runs. Values not
// known (0 in `v`) stay as configured, marked as inferred at launch.
Config with_inferred_values(const Config& config, const InferredValues& v);

// Every valid key as "section.key", for --help and for suggestions.
std::vector<std::string> config_keys();

// docs/config.md's table of one section (markdown: key, type, default, allowed, meaning), made
// from the key table the parser uses.
std::string config_docs_table(const std::string& section);
// `markdown` with every block marked as generated (see docs/config.md) replaced by the current
// table of its section: what `trainer print-config --docs FILE` prints.
std::string regenerate_config_docs(const std::string& markdown);

// Every key ("section.key") with its value in `config` as TOML text, in the key table's order.
std::vector<std::pair<std::string, std::string>> config_values(const Config& config);

// The value of `key` ("section.key") in `config`, as TOML text; throws ConfigError for an
// unknown key.
std::string config_value(const Config& config, const std::string& key);

// A key whose value differs between two configs, each value as TOML text.
struct KeyDifference {
  std::string key, theirs, mine;
};
// The keys `compared` accepts whose values differ between `theirs` (a saved run's) and `mine`, in
// the key table's order.
std::vector<KeyDifference> key_differences(const Config& theirs, const Config& mine,
                                           const std::function<bool(const std::string&)>& compared);

}  // namespace feast
