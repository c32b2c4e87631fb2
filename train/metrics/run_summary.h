// What each step cost and why, for metrics.jsonl, TensorBoard and the end-of-run summary: a
// step's time split into compute, tensor- and context-parallel communication, pipeline idle, exposed
// data-parallel communication, optimizer, data loading and the rest (averaged over ranks, so
// the parts add up to the step), its MFU, and over the run the measured pipeline idle next to
// the formula (p - 1) / (m + p - 1), the scaling efficiency E = compute / (compute + exposed
// communication), summary.json and the printed summary.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "config/config.h"
#include "parallel/pipeline/schedule.h"
#include "train/metrics/device_peak.h"
#include "train/training_run.h"

namespace feast {

// Seconds of one step by what the ranks were doing; the parts sum to `total`.
struct TimeSplit {
  double compute = 0;    // forward and backward arithmetic
  double tp_comm = 0;    // tensor-parallel all-reduces inside forward and backward
  double cp_comm = 0;    // context parallelism's ring: waiting for key/value blocks not yet arrived
  double ep_comm = 0;    // expert parallelism's all-to-all exchanges of tokens inside forward and backward
  double pp_idle = 0;    // waiting on a neighbour stage: the bubble plus transfers
  double dp_comm = 0;    // data-parallel reductions and gathers not hidden behind the backward
  double optimizer = 0;  // norm, clipping and the AdamW update
  double data = 0;       // filling micro-batches from the data loader
  double other = 0;      // the rest of the step (the loss and norm reduction, bookkeeping)
  double total = 0;
  // Not parts of the step (they overlap the others): how long the data-parallel gradient
  // reductions ran, and the part of dp_comm spent waiting for them.
  double dp_reduce = 0, dp_reduce_exposed = 0;
  // ZeRO 3's gathers of units during the passes: the same two figures.
  double dp_gather = 0, dp_gather_exposed = 0;
  // Offloaded optimizer (parts of `optimizer`): the host's update, and its waits for gradients
  // to arrive from the device.
  double offload_update = 0, offload_wait = 0;
  // Context parallelism: the attention cores' time on the ring (its blocks, transfers and the
  // cp_comm waits) and the bytes the rank sent round it.
  double cp_ring = 0, cp_bytes = 0;
  // The parts a timer saw: all but `other`.
  double timed() const { return compute + tp_comm + cp_comm + ep_comm + pp_idle + dp_comm + optimizer + data; }
  // E: the share of compute in compute plus exposed communication and idle.
  double efficiency() const;
  // The pipeline's share of idle over the span the schedule runs (compute, tensor-parallel
  // communication, data loading and the idle itself): what (p - 1) / (m + p - 1) predicts.
  double pipeline_idle_fraction() const;
  TimeSplit& operator+=(const TimeSplit& o);
  TimeSplit scaled(double f) const;
  // Every figure above, in one order: what is added, scaled and averaged over ranks field by
  // field (one list, so a new figure cannot be left out of one of them).
  static constexpr std::array kMembers = {
      &TimeSplit::compute,        &TimeSplit::tp_comm,   &TimeSplit::cp_comm,       &TimeSplit::ep_comm,
      &TimeSplit::pp_idle,        &TimeSplit::dp_comm,   &TimeSplit::optimizer,
      &TimeSplit::data,           &TimeSplit::other,     &TimeSplit::total,
      &TimeSplit::dp_reduce,      &TimeSplit::dp_reduce_exposed, &TimeSplit::dp_gather,
      &TimeSplit::dp_gather_exposed, &TimeSplit::offload_update, &TimeSplit::offload_wait,
      &TimeSplit::cp_ring,        &TimeSplit::cp_bytes};
  static constexpr size_t kFields = kMembers.size();
};

// This rank's step, its parts made to add up (`other` takes what no timer saw).
TimeSplit split_of(const StepTiming& t);
// Collective over world: the mean of every rank's split.
TimeSplit mean_over_ranks(Communicator& world, const TimeSplit& mine);

// Model FLOPs utilisation: the step's model FLOPs over the job's peak in that time.
double mfu(double flops_per_token, int64_t tokens, double seconds, const DevicePeak& peak, int world_size);

// The statistics of a run's steps: the first step run (warm-up: allocation, page faults) is left
// out of the means when more than one ran.
class RunStatistics {
 public:
  void add(const TimeSplit& mean_split);
  int64_t steps() const { return steps_; }
  TimeSplit mean() const;  // per measured step
 private:
  int64_t steps_ = 0;
  TimeSplit first_, sum_;
};

struct RunFacts {
  const Config* config = nullptr;
  std::string config_path;
  int world_size = 1, tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, micro_batches = 1;
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  int virtual_stages = 1;  // model chunks per stage (interleaved 1F1B)
  int64_t tokens_per_step = 0;
  double parameters = 0;       // N of model/flop_count.h
  double flops_per_token = 0;  // 6 N + 6 L T C
  DevicePeak peak;
  std::string cpu_kernels;          // the BLAS kernels in use on the CPU: describe_blas() ("" on a GPU)
  std::vector<MemoryBytes> memory;  // every rank's, by world rank
};

// A parameter server's traffic, the mean per rank and step: pushed and pulled as run, and what
// the dense exchange would move (the same unless the embedding is sparse).
struct ServerTraffic {
  double push = 0, pull = 0, dense_push = 0, dense_pull = 0;
  double refresh = 0;  // sparse: whole-embedding pulls before evaluations and at the end, per rank in all
};

struct RunOutcome {
  std::string ended;
  int64_t first_step = 0, steps = 0, tokens_seen = 0;
  double train_seconds = 0;
  std::optional<double> final_loss, final_val_loss;
  TimeSplit mean_split;  // per measured step
  int64_t measured_steps = 0;
  std::optional<ServerTraffic> server_traffic;  // with parallel.dp_sync = "parameter-server"
  std::vector<MemoryBytes> memory_high_water;   // every rank's, by world rank, after the steps
};

// The split as metrics.jsonl and summary.json name it: {"compute_s": ..., ..., "other_s": ...}.
nlohmann::json split_json(const TimeSplit& split);
// The gradient reductions' figures: {"dp_reduce_s": ..., "dp_reduce_exposed_s": ...}.
nlohmann::json reduction_json(const TimeSplit& split);
// The offloaded optimizer's: {"offload_update_s": ..., "offload_wait_s": ...}.
nlohmann::json offload_json(const TimeSplit& split);

// summary.json's object (docs/observability.md lists its keys).
std::string summary_json(const RunFacts& facts, const RunOutcome& outcome);
// The lines printed at the end of a run: the time split, idle against the formula, E and MFU.
std::vector<std::string> format_summary(const RunFacts& facts, const RunOutcome& outcome);

// Bytes as MiB with two decimals ("13.06"), as the memory reports print them.
std::string mib(double bytes);

// The start-up memory table (MiB): one row per rank up to 16 ranks or with every_rank, else one
// row per distinct set of figures with the ranks that hold it as ranges ("0-3,8-11"), which for
// a job of any size is a row or two per pipeline stage.
std::vector<std::string> format_memory_table(const std::vector<MemoryBytes>& memory, bool every_rank);

// Collective over world: every rank's memory, by world rank.
std::vector<MemoryBytes> gather_memory(Communicator& world, const MemoryBytes& mine);

}  // namespace feast
