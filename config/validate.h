// The rules a config must pass, in one place: validate_config() relates keys to each other (the
// model's shape, the parameter server against ZeRO, the device against the dtype and the
// communication library, faults against their step); parsing runs it, and so must code that
// builds a Config itself. check_run() adds what a run needs beyond the keys (its world size, the
// data it reads, its device) and returns the layout; a run calls it once, before anything is
// allocated. Every failure is a ConfigError naming the keys and where they were set.
#pragma once

#include "config/config.h"
#include "config/layout_plan.h"

namespace feast {

// What a run is for: training (data.train, optionally data.val) or evaluation only (`trainer
// eval`: data.val alone, no optimizer steps).
enum class RunPurpose { kTrain, kEvaluate };

void validate_config(const Config& config);

// The same on every rank of a world of `world_size`.
LayoutPlan check_run(const Config& config, int world_size, RunPurpose purpose = RunPurpose::kTrain);

}  // namespace feast
