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
#include "trainer/config.h"
#include "trainer/training_run.h"

namespace feast {

// The checkpoint directory in use: checkpoint.dir, or <logging.dir>/checkpoints.
std::string checkpoint_dir(const Config& config);

// Collective: saves the run's state after its current step into checkpoint_dir(config) and
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

}  // namespace feast
