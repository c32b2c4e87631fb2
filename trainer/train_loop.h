// The training loop of one rank in a dp x pp x tp job: plans and checks the layout, opens the
// data (before any model memory is allocated), builds this rank's stage of the model, its
// gradient synchronisation and its shard of the optimizer, then runs training.steps steps of
// the pipeline schedule with periodic evaluation. Rank 0 prints progress and writes
// metrics.jsonl; losses and norms are reduced from the ranks that own them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/communicator.h"
#include "model/gpt2_stage.h"
#include "parallel/pipeline_executor.h"
#include "trainer/config.h"

namespace feast {

// Where one rank's time went in one step (seconds).
struct StepTiming {
  double total = 0;
  StageTimes stage;      // forward/backward compute, tensor-parallel and pipeline communication
  double dp_comm = 0;    // gradient reductions, the embedding sum and the parameter all-gather
                         // (the part not hidden behind the backward)
  double optimizer = 0;  // norm, clipping and the AdamW update of this rank's shard
};

struct TrainSummary {
  int64_t steps = 0;
  std::vector<double> losses;     // mean training loss of every step (the same on every rank)
  std::vector<double> grad_norms;  // global gradient norm of every step
  double final_loss = 0;
  std::optional<double> final_val_loss;
  double tokens_per_s = 0;  // over the whole run, evaluation excluded
  std::vector<StepTiming> timings;  // this rank's, every step
};

// Called on every rank after the last step with the rank's stage (tests read its weights).
using FinishHook = std::function<void(const GPT2Stage&)>;

// world: the job's ranks (its size is checked against the layout). Throws ConfigError or
// DataError on bad input before allocating the model.
TrainSummary train(const Config& config, std::unique_ptr<Communicator> world, const FinishHook& on_finish = {});

}  // namespace feast
