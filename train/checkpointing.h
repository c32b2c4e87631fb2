// The trainer's side of checkpoints: what a save records about the run (step, tokens, seed, the
// resolved config and the layout) and how a run starts from one (checkpoint.resume), checking
// that the checkpoint describes the configured model and falling back to older checkpoints when
// the newest is corrupt.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "checkpoint/async_checkpoint_writer.h"
#include "checkpoint/checkpoint_file.h"
#include "config/config.h"
#include "train/training_run.h"

namespace feast {

// Collective: saves the run's state after its current step into checkpoint.dir and
// keeps the newest checkpoint.keep. Returns the path written.
std::string save_checkpoint(TrainingRun& run, const Config& config);

// The training loop's saves: synchronous, or with checkpoint.async through a writer thread,
// so that a periodic save costs a step only the copy of the state.
class CheckpointSaver {
 public:
  // Collective over the run's world (the writer gets a duplicate of it).
  CheckpointSaver(TrainingRun& run, const Config& config);
  ~CheckpointSaver();
  // Collective: saves after the run's current step. With `finish` (the run stops after it) the
  // save is complete when this returns.
  void save(bool finish);
  // Collective: waits for a save in flight; the newest checkpoint this run committed, if any.
  std::optional<std::string> finish();

 private:
  TrainingRun& run_;
  const Config& config_;
  std::unique_ptr<AsyncCheckpointWriter> writer_;
  std::optional<std::string> last_;
};

// Collective: restores the run from the checkpoint checkpoint.resume selects, if any; returns
// its metadata. Throws ConfigError when the checkpoint was saved for another model or seed
// (listing the differences), CheckpointError when no candidate checkpoint loads.
std::optional<CheckpointMeta> resume_from_checkpoint(TrainingRun& run, const Config& config);

// Whether checkpoint.resume can name a checkpoint: not "never", and for "auto" a checkpoint.dir
// is known (eval and generate make no run directory to find one in).
bool may_resume(const Config& config);

// The checkpoints checkpoint.resume selects, newest first: a file, or the complete ones of a
// directory (`explicit_file`: the config named a file). "never" gives none (and warns when
// the directory holds an earlier run's); a named path that holds nothing is a ConfigError.
std::vector<std::string> checkpoint_candidates(const Config& config, bool& explicit_file);
std::vector<std::string> checkpoint_candidates(const Config& config);

// Collective: resume_from_checkpoint, or, when no checkpoint is resumed, the weights of
// model.init_from (so a resumed run neither reads nor needs the Hugging Face folder).
std::optional<CheckpointMeta> start_from_checkpoint_or_import(TrainingRun& run, const Config& config);

// How the model a checkpoint's stored config describes differs from `config`'s ("model.n_layer:
// 4 in the checkpoint, 6 configured"); empty when they agree or the file stores no config. The
// initialisation, init_from and the tokenizer's place do not count.
std::vector<std::string> model_differences(const Config& config, const CheckpointMeta& meta, const std::string& path);

}  // namespace feast
