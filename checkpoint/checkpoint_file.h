// One checkpoint as one HDF5 file (docs/checkpoint-format.md): datasets hold logical tensors in
// full shape, `model/<name>` and `optim/{master,exp_avg,exp_avg_sq}/<name>`, float32; the root's
// attributes hold where training is (step, tokens, data and LR position, RNG seed), the resolved
// config and the layout it was saved with; each dataset carries the CRC-32 of its bytes.
//
// Writing is collective: with parallel HDF5 (MPI-IO) every rank writes only the hyperslabs it
// owns, as the parameter table maps its flat buffer to logical tensors; nothing is gathered. A
// logical element is owned by exactly one rank of the job: the one that counts it in the
// gradient norm (tensor-parallel rank 0 for replicated tensors, never a tied copy) and whose
// data-parallel share of the flat buffer holds it. Reading is collective too: each rank reads
// the slices its stage and optimizer shard need at its own layout (which need not be the one
// the file was saved with), and the owned part's checksums, combined over the ranks, must
// match every dataset's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/hdf5_handle.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "model/parameters.h"
#include "optim/adamw.h"

namespace feast {

// The file describes another model than the one configured: not corruption (no fallback to an
// older checkpoint helps); the message lists the differences.
class CheckpointMismatch : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

inline constexpr int kCheckpointFormatVersion = 1;

// Where training is and how the run was laid out: the root group's attributes.
struct CheckpointMeta {
  int format_version = kCheckpointFormatVersion;
  int64_t step = 0;           // optimizer steps taken
  int64_t tokens_seen = 0;    // training tokens consumed by those steps
  uint64_t seed = 0;          // training.seed: initialisation and data order
  int64_t data_step = 0;      // the sampler's position: the step whose batch comes next
  int64_t lr_step = 0;        // the learning-rate schedule's position
  uint64_t rng_seed = 0;      // the counter-based generator's key (its counter is the step)
  int64_t skipped_steps = 0;  // updates skipped for a non-finite loss (training.skip_nonfinite)
  std::string config;         // the resolved config, TOML
  std::string layout;         // "tp2 pp2 dp2 zero1, 2 x 4 sequences per dp rank"
  int tp = 1, pp = 1, dp = 1, cp = 1, zero_stage = 0;
  int micro_batch_size = 1, num_micro_batches = 1;
  int64_t global_batch = 0;   // sequences per optimizer step
  // LoRA: the frozen base the adapters were trained on, as interop/hf/weights_fingerprint.h
  // names it (empty: no LoRA, or a base initialised from the seed).
  std::string lora_base;
};

// One rank's view of the training state it saves or restores.
struct RankState {
  const LocalTable* table = nullptr;
  TensorView params;                          // the stage's flat buffer (host float32: a GPU run's copy)
  std::vector<AdamW::TensorState> optimizer;  // master weights and moments this rank keeps
  size_t share_begin = 0, share_end = 0;      // this data-parallel rank's share of the flat buffer
};

// Collective over `world` (an MPI group, or a group of one): writes `path` (created or
// truncated) and closes it, so that every byte is in the file system when it returns. Throws
// CheckpointError naming the path on any failure, on every rank alike (the message of the
// lowest rank that failed), even when only some ranks failed.
void write_checkpoint(const std::string& path, Communicator& world, const RankState& state,
                      const CheckpointMeta& meta);

// What one rank writes of a checkpoint, copied out of the training state, so that training can
// go on changing the state while another thread writes the copy (checkpoint.async).
class CheckpointSnapshot {
 public:
  CheckpointSnapshot(const RankState& state, const CheckpointMeta& meta);
  ~CheckpointSnapshot();
  CheckpointSnapshot(CheckpointSnapshot&&) noexcept;
  CheckpointSnapshot& operator=(CheckpointSnapshot&&) noexcept;

  // Copies `state` again into the same memory (a later save of the same run).
  void capture(const RankState& state, const CheckpointMeta& meta);
  size_t bytes() const;  // host memory the copy holds
  int64_t step() const;
  // Collective over `world`, like write_checkpoint; checksums on the calling thread only.
  void write(const std::string& path, Communicator& world) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads the root attributes only (one process; any rank may call it).
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Collective: fills `state`'s parameters and optimizer state from `path`. Throws, on every rank
// alike, CheckpointMismatch when the file's tensors differ from the table's (the message lists
// them), CheckpointError when the file is unreadable or a dataset's checksum does not match
// (naming the file and the dataset).
void read_checkpoint(const std::string& path, Communicator& world, const RankState& state);

// One process: the weights of every tensor of `model` in checkpoint `path` (the optimizer's
// float32 master weights), whole, for export and generation. They are read by read_checkpoint,
// as a resume at one rank reads them, so a file a resume refuses is refused here alike: every
// dataset's checksum is verified (the moments' too, though only the weights are kept) and the
// tensors' names and shapes must be the model's. Throws CheckpointMismatch (listing the
// differences) or CheckpointError (naming the file and dataset).
class CheckpointWeights {
 public:
  CheckpointWeights(const std::string& path, const ModelConfig& model);
  // The tensors of `logical` (LoRA's adapters, say) rather than the model's.
  CheckpointWeights(const std::string& path, const ModelConfig& model, ParamTable logical);
  // The local table points into the logical one: neither copied nor moved.
  CheckpointWeights(const CheckpointWeights&) = delete;
  CheckpointWeights& operator=(const CheckpointWeights&) = delete;

  // The whole logical tensor `name` ("wte.weight"; a tied name gives its target's values).
  std::vector<float> tensor(const std::string& name) const;

 private:
  ParamTable logical_;
  LocalTable local_;
  std::vector<float> flat_;  // the whole model's weights, laid out by local_
};

// For tests of failure handling: this rank's writes of checkpoint data fail (as under a full
// disk) until called again with false.
void fail_checkpoint_writes_for_testing(bool fail);

// The bytes of a checkpoint of the model `table` describes: float32 weights, master weights and
// both moments of every logical element (docs/checkpoint-format.md); the weights alone, which
// `trainer export` writes in float32, are a quarter of it.
double checkpoint_bytes(const ParamTable& table);

// "(384, 64)", "(64,)": a shape as messages and `trainer inspect` write it.
std::string format_shape(const std::vector<int64_t>& shape);

// What `trainer inspect` shows of one dataset; verification reads it whole (one process).
struct DatasetReport {
  std::string name;  // "model/wte.weight"
  std::vector<int64_t> shape;
  std::string dtype;
  std::optional<uint32_t> stored_crc;  // none: the file carries no checksum for it
  uint32_t actual_crc = 0;
  std::string error;  // reading it failed
  bool ok() const { return error.empty() && stored_crc && *stored_crc == actual_crc; }
};
std::vector<DatasetReport> verify_checkpoint(const std::string& path);

}  // namespace feast
