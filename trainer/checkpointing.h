// The trainer's side of checkpoints: what a save records about the run (step, tokens, seed, the
// resolved config and the layout) and how a run starts from one (checkpoint.resume), checking
// that the checkpoint describes the configured model and falling back to older checkpoints when
// the newest is corrupt.
#pragma once

#include <optional>
#include <string>

#include "checkpoint/checkpoint_file.h"
#include "trainer/config.h"
#include "trainer/training_run.h"

namespace feast {

// The checkpoint directory in use: checkpoint.dir, or <logging.dir>/checkpoints.
std::string checkpoint_dir(const Config& config);

// Collective: saves the run's state after its current step into checkpoint_dir(config) and
// keeps the newest checkpoint.keep. Returns the path written.
std::string save_checkpoint(TrainingRun& run, const Config& config);

// Collective: restores the run from the checkpoint checkpoint.resume selects, if any; returns
// its metadata. Throws ConfigError when the checkpoint was saved for another model or seed
// (listing the differences), CheckpointError when no candidate checkpoint loads.
std::optional<CheckpointMeta> resume_from_checkpoint(TrainingRun& run, const Config& config);

}  // namespace feast
