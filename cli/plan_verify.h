// `trainer plan ... --verify`: runs the layout the plan chose for a few steps on this machine
// (through mpiexec, as many ranks as --gpus) and prints what each rank was predicted to need
// and what it measured: memory by part, and the step time.
#pragma once

#include <string>

#include "config/config.h"
#include "plan/cost_model.h"

namespace feast {

struct VerifyRequest {
  std::string config_file;  // the chosen layout as a config (--write's file, or a temporary one)
  std::string work_dir;     // the run's directory and logs
  int gpus = 1;
  PlanOptions options;      // as the plan counted memory
  bool machine_figures = false;  // the plan's times used this machine's calibrated figures
};

// `chosen`: the config the file holds; `predicted`: its estimate. Returns 0 when the run
// finished and was compared; throws Error saying why when it could not run.
int verify_plan(const Config& chosen, const LayoutEstimate& predicted, const VerifyRequest& request);

}  // namespace feast
