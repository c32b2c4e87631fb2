// The run's configuration: one TOML file (toml++) plus `--set section.key=value` overrides,
// parsed into typed structs with documented defaults (docs/config.md documents every key).
// Unknown keys, wrong types and out-of-range values are ConfigErrors that name the key, where
// it was set (file:line or --set) and, for a typo, the nearest valid key. Nothing is allocated
// before the config is valid.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace feast {

struct ParallelConfig {
  int tp = 1;                 // tensor-parallel degree
  int pp = 1;                 // pipeline-parallel degree
  int dp = 0;                 // data-parallel degree; 0 = world size / (tp * pp)
  std::string order = "tp-dp-pp";  // rank-numbering axes, innermost first
  int zero_stage = 1;         // 0 all-reduce, 1 shard optimizer state, 2 also gradients
  int micro_batch_size = 4;   // sequences per micro-batch on one rank
  int num_micro_batches = 1;  // micro-batches per step per data-parallel rank
  std::string schedule = "1f1b";  // pipeline schedule: "1f1b" or "gpipe"
  double bucket_mb = 4.0;     // gradient-reduction bucket size in MiB
  std::vector<int> stage_layers;  // layers per pipeline stage; empty = as even as possible
  double timeout_s = 300;     // a collective or receive waiting longer ends the job (watchdog)
};

struct TrainingConfig {
  int64_t steps = 100;
  // Sequences per optimizer step over all ranks; 0 = dp * num_micro_batches * micro_batch_size.
  // When set, num_micro_batches is derived from it, so one config keeps the same global batch
  // at every layout.
  int64_t batch_size = 0;
  uint64_t seed = 1337;
  std::string device = "cpu";  // "cpu" ("cuda" comes with the CUDA backend issue)
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
};

struct DataConfig {
  std::string train;  // token shards: a file, a directory, or a glob such as "dir/train_*.bin"
  std::string val;    // same forms; empty = no validation
};

struct CheckpointConfig {
  std::string dir = "checkpoints";
  int64_t interval = 0;  // save every N steps; 0 = never (checkpointing comes with a later issue)
  int keep = 3;          // how many checkpoints to keep
};

struct LoggingConfig {
  std::string dir = "runs/default";  // run directory: metrics.jsonl and logs go here
  int64_t interval = 1;              // print a progress line every N steps
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainingConfig training;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;

  // Where each key got its value: "file.toml:12", "--set" or "default". Later checks (world
  // size, data paths) use it to point the user at the line to change.
  std::map<std::string, std::string> origin;
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

// The resolved config as TOML, printed at start and saved in the run directory.
std::string to_toml(const Config& config);

// Every valid key as "section.key", for --help and for suggestions.
std::vector<std::string> config_keys();

}  // namespace feast
