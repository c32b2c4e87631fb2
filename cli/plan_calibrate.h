// `trainer plan CONFIG --gpus N --calibrate`: measures the figures the planner predicts step
// times with on this machine (plan/machine_constants.h) and writes them where later plans find
// them: the achieved TFLOP/s of the config's model, one rank's threads at its micro-batch, and
// the link's α and β from `trainer bench comm` between two ranks launched through mpiexec.
#pragma once

#include <string>

#include "config/config.h"

namespace feast {

struct CalibrateRequest {
  int ranks_per_node = 1;  // ranks that will share this host (a CPU rank's threads follow)
  int threads = 1;         // OpenMP threads per rank
  double seconds = 20;     // the compute measurement's budget
  std::string path;        // where the figures go
};

// Returns the exit status: 0 written; throws ConfigError for what the user can fix.
int calibrate_plan(const Config& config, const CalibrateRequest& request);

}  // namespace feast
