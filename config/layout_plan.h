// Turns the [parallel] section and the world size into the run's layout, checking everything
// that can be wrong with it before anything is allocated: the world size against tp * pp * dp,
// tp against the query and key/value heads, the MLP width and the padded vocabulary, pp against
// the layers, the explicit stage split, and the global batch against dp and the micro-batch
// size. Each problem is a ConfigError naming the keys and where they were set.
#pragma once

#include <vector>

#include "model/stage_spec.h"
#include "comm/layout.h"
#include "parallel/pipeline/schedule.h"
#include "config/config.h"

namespace feast {

struct LayoutPlan {
  ParallelLayout layout;
  int micro_batches = 1;          // per step on each data-parallel rank
  std::vector<int> stage_layers;  // layers of each pipeline stage
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  // Model chunks per stage (interleaved 1F1B): stage s's layers cut into this many equal chunks,
  // chunk c following virtual stage c·pp + s - 1's (the last stage's chunk c - 1 for s = 0).
  int virtual_stages = 1;
  // Expert parallelism (parallel.ep; 1 for a dense model): ep consecutive data-parallel ranks
  // divide every MoE block's experts.
  int ep = 1;

  // The ranks ZeRO shards a stage over (GradientSync): the data-parallel replicas, or under
  // expert parallelism the dp / ep of them that hold the same experts.
  int shard_ranks() const { return layout.replicas() / ep; }

  // The part of the model world rank `rank` holds: its stage's layers (one range per chunk) and
  // tensor-parallel slice.
  StageSpec stage_of(int rank) const;
};

LayoutPlan plan_layout(const Config& config, int world_size);

}  // namespace feast
