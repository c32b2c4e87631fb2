// What `trainer plan` prints: every layout of a config on a cluster as the cost model predicts
// it (a table of the best, or JSON), the layouts dropped and why, and the cluster's failure rate
// with the checkpoint interval that loses the least work.
#pragma once

#include <optional>
#include <string>

#include "config/config.h"
#include "plan/cost_model.h"

namespace feast {

struct PlanRequest {
  std::string config_path;   // named in the heading
  PlanOptions options;       // the cluster and how memory is counted
  bool dtype_given = false;  // options.memory.dtype came from the command line, not the config
  double mttf_hours = 50000;         // one GPU's mean time to failure
  double checkpoint_seconds = -1;    // the time to save a checkpoint; < 0: estimated from its size
  double checkpoint_bw = 2e9;        // the write bandwidth of that estimate, bytes/s
  int top = 10;                      // table rows
  bool why = false;                  // also list every dropped layout and why
  bool json = false;                 // every layout as a JSON array instead
  std::string figures;               // which figures the time predictions use, in words (the heading)
};

// Prints the plan through log::info and returns the fastest layout that fits (the table's first
// row). Throws ConfigError naming --gpu-memory when layouts are valid but none fits (after the
// dropped ones, with --why); returns nothing when no layout is valid at all.
std::optional<LayoutEstimate> print_plan(const Config& config, const PlanRequest& r);

}  // namespace feast
