#include "trainer/train_loop.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "parallel/grad_sync.h"
#include "parallel/grid_report.h"
#include "parallel/optimizer.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_groups.h"
#include "trainer/layout_plan.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"

namespace feast {
namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1024.0 * 1024.0));
  return buf;
}

// Opens a split, naming the config key that chose it when anything is wrong.
Dataset open_split(const Config& config, const std::string& key, const std::string& pattern) {
  try {
    Dataset d(pattern);
    d.check_vocab(config.model.vocab_size);
    return d;
  } catch (const DataError& e) {
    throw DataError(std::string(e.what()) + " [" + key + " set at " + config.where(key) + "]");
  }
}

// Collective: throws AgreedError on every rank when `error` is non-empty on any rank; the
// lowest such rank reports its message.
void agree_on_error(Communicator& world, const std::string& error) {
  int32_t first = error.empty() ? std::numeric_limits<int32_t>::max() : world.rank();
  CollectiveOptions min;
  min.op = ReduceOp::kMax;
  int32_t negated = -first;  // the minimum as a maximum of negatives (the interface has max)
  world.allreduce(&negated, 1, DType::kInt32, min)->wait();
  first = -negated;
  if (first == std::numeric_limits<int32_t>::max()) return;
  throw AgreedError(first == world.rank() ? error : "rank " + std::to_string(first) + " failed", first == world.rank());
}

void check_runnable(const Config& config) {
  if (config.data.train.empty())
    throw ConfigError("data.train is not set: name the training shards in [data] train = \"...\" or with "
                      "--set data.train=PATH (make them with `trainer prepare-data`)");
  if (config.training.device != "cpu")
    throw ConfigError(config.where("training.device") + ": training.device = \"" + config.training.device +
                      "\" is not available in this build yet; use \"cpu\"");
  if (config.checkpoint.interval > 0)
    throw ConfigError(config.where("checkpoint.interval") +
                      ": checkpoint.interval > 0, but checkpoints are not built yet and a run that "
                      "believes it saves would lose its work; set checkpoint.interval = 0");
}

// Every rank's memory, gathered and printed by rank 0 as one table.
void report_memory(Communicator& world, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * size_t(world.size()));
  std::vector<size_t> counts(size_t(world.size()), mine.size());
  world.allgather(mine.data(), all.data(), counts, DType::kFloat64)->wait();
  log::info("memory per rank (MiB): rank | parameters | gradients | optimizer | activations");
  for (int r = 0; r < world.size(); ++r) {
    const double* m = all.data() + size_t(r) * mine.size();
    char line[160];
    std::snprintf(line, sizeof line, "  %4d | %10s | %9s | %9s | %11s", r, mib(m[0]).c_str(), mib(m[1]).c_str(),
                  mib(m[2]).c_str(), mib(m[3]).c_str());
    log::info(line);
  }
}

}  // namespace

TrainSummary train(const Config& config, std::unique_ptr<Communicator> world_comm, const FinishHook& on_finish) {
  const TrainingConfig& tc = config.training;
  check_runnable(config);
  const LayoutPlan plan = plan_layout(config, world_comm->size());
  const ParallelLayout& layout = plan.layout;
  if (tc.threads > 0) omp_set_num_threads(tc.threads);

  // Everything that can be wrong with the data is found before the model is allocated, and
  // the ranks agree on it: one message (from the lowest failing rank), every rank exits.
  std::optional<Dataset> train_data, val_data;
  std::optional<TrainSampler> sampler;
  std::optional<ValSampler> val_sampler;
  std::string data_error;
  try {
    train_data.emplace(open_split(config, "data.train", config.data.train));
    sampler.emplace(*train_data, tc.seed, tc.seq_len);
    if (!config.data.val.empty()) {
      val_data.emplace(open_split(config, "data.val", config.data.val));
      val_sampler.emplace(*val_data, tc.seq_len);
    }
  } catch (const DataError& e) {
    data_error = e.what();
  }
  agree_on_error(*world_comm, data_error);
  log::info("resolved config:\n" + to_toml(config));

  const int world_rank = world_comm->rank();
  ProcessGroups groups = make_process_groups(std::move(world_comm), layout);
  Communicator& world = *groups.world;
  if (world.size() > 1) {
    const std::vector<std::string> hosts = gather_host_names(world);
    log::info(describe_grid(layout, hosts));
    if (tc.threads == 0) {
      // Share this host's cores among its ranks: OpenMP's default of every core per rank would
      // oversubscribe them, and spinning OpenMP barriers collapse under oversubscription.
      const long here = std::count(hosts.begin(), hosts.end(), hosts[size_t(world_rank)]);
      omp_set_num_threads(std::max(1, int(std::thread::hardware_concurrency() / std::max(1L, here))));
    }
  }

  const RankCoord me = layout.coord(world_rank);
  const int B = config.parallel.micro_batch_size, T = tc.seq_len, m = plan.micro_batches;
  const StageSpec spec = plan.stage_of(world_rank);
  const int slots = PipelineExecutor::slots_needed(plan.schedule, layout.pp(), me.pp, m);
  GPT2Stage stage(config.model, spec, B, T, slots, layout.tp() > 1 ? groups.tp.get() : nullptr);
  init_local_parameters(stage.table(), tc.seed, stage.params());

  const size_t bucket_elems = static_cast<size_t>(config.parallel.bucket_mb * 1024 * 1024 / sizeof(float));
  stage.set_gradient_range_limit(bucket_elems);
  Communicator* dp = layout.dp() > 1 ? groups.dp.get() : nullptr;
  Communicator* embedding = layout.pp() > 1 ? groups.embedding.get() : nullptr;
  GradientSync sync(stage.num_params(), stage.gradient_ranges(), stage.wte_ranges(),
                    stage.wte_uses_per_backward(), config.parallel.zero_stage, bucket_elems, dp, embedding);
  stage.set_gradient_sink(&sync);
  const int zero = sync.zero_stage();  // 0 whenever dp = 1
  const ShardRange shard = sync.shard();
  const ShardRange opt_range = zero == 0 ? ShardRange{0, stage.num_params()} : shard;
  AdamWConfig oc;
  oc.beta1 = tc.beta1;
  oc.beta2 = tc.beta2;
  oc.eps = tc.eps;
  oc.weight_decay = tc.weight_decay;
  oc.grad_clip = tc.grad_clip;
  AdamW optimizer(stage.table(), opt_range.begin, opt_range.end, oc);
  PipelineExecutor executor(stage, layout.pp() > 1 ? groups.pp.get() : nullptr, plan.schedule, m, B, T);
  // Shard sizes of every data-parallel rank, for the parameter all-gather after the update.
  std::vector<size_t> shard_sizes;
  for (int d = 0; d < layout.dp(); ++d) shard_sizes.push_back(shard_range(stage.num_params(), layout.dp(), d).size());

  const int64_t global_sequences = int64_t{layout.dp()} * m * B;
  const int64_t tokens_per_step = global_sequences * T;
  log::info("data: train " + std::to_string(train_data->total_tokens()) + " tokens in " +
            std::to_string(train_data->num_shards()) + " shard(s)" +
            (val_data ? ", val " + std::to_string(val_data->total_tokens()) + " tokens" : ", no validation"));
  log::info("model: " + std::to_string(config.model.n_layer) + " layers over " + std::to_string(layout.pp()) +
            " stage(s) " + format_list(plan.stage_layers) + ", tp " + std::to_string(layout.tp()) + ", dp " + std::to_string(layout.dp()) + ", ZeRO " +
            std::to_string(zero) + ", " + config.parallel.schedule + "; batch " + std::to_string(layout.dp()) +
            " x " + std::to_string(m) + " x " + std::to_string(B) + " x " + std::to_string(T) + " = " +
            std::to_string(tokens_per_step) + " tokens/step; " + std::to_string(omp_get_max_threads()) +
            " threads per rank");
  report_memory(world, {double(stage.num_params()) * 4, double(sync.gradient_bytes()), double(optimizer.state_bytes()),
                        double(stage.activation_bytes())});

  std::optional<MetricsWriter> metrics;
  if (world_rank == 0) {
    std::filesystem::create_directories(config.logging.dir);
    std::ofstream(config.logging.dir + "/config.toml") << to_toml(config);
    metrics.emplace(config.logging.dir + "/metrics.jsonl");
  }

  // This rank reports the loss only if it owns it: the last stage, one tensor-parallel rank.
  const bool owns_loss = spec.has_head && me.tp == 0;
  const float loss_scale = 1.0f / float(tokens_per_step);
  TrainSummary summary;
  double train_seconds = 0;
  for (int64_t step = 0; step < tc.steps; ++step) {
    Timer timer;
    sync.begin_step();
    const BatchFill fill = [&](int k, int32_t* x, int32_t* y) {
      sampler->fill(step, (int64_t{me.dp} * m + k) * B, B, x, y);
    };
    const double local_loss = executor.train(fill, sync, loss_scale);
    const double backward_waits = sync.take_wait_seconds();  // ZeRO 2 waiting inside the backward
    Timer dp_timer;
    sync.finish_step();
    sync.take_wait_seconds();  // finish_step's waits are in dp_timer
    double dp_seconds = dp_timer.seconds() + backward_waits;
    Timer opt_timer;
    // One reduction for the loss (owned by the last stage) and the squared gradient norm
    // (each logical element counted once over tp, pp and dp).
    double reduced[2] = {owns_loss ? local_loss : 0.0,
                         counted_sum_of_squares(stage.table(), sync.shard_grads(), shard.begin, shard.end)};
    world.allreduce(reduced, 2, DType::kFloat64)->wait();
    const double loss = reduced[0] / double(layout.dp() * m);
    const double grad_norm = std::sqrt(reduced[1]);
    const double lr = learning_rate(tc, step);
    if (!std::isfinite(loss) || !std::isfinite(grad_norm))
      throw Error("step " + std::to_string(step + 1) + ": loss " + std::to_string(loss) + ", grad norm " +
                  std::to_string(grad_norm) + " is not finite; lower training.lr or raise training.warmup_steps");
    if (zero == 0) {
      optimizer.step(stage.params(), sync.shard_grads() - shard.begin, step + 1, lr, grad_norm);
    } else {
      optimizer.step(stage.params() + shard.begin, sync.shard_grads(), step + 1, lr, grad_norm);
    }
    const double opt_seconds = opt_timer.seconds();
    if (zero > 0) {
      Timer gather;
      dp->allgather(stage.params() + shard.begin, stage.params(), shard_sizes, DType::kFloat32)->wait();
      dp_seconds += gather.seconds();
    }
    const double sec = timer.seconds();
    train_seconds += sec;
    StageTimes st = executor.take_times();
    st.compute -= backward_waits;  // counted as data-parallel communication
    summary.timings.push_back({sec, st, dp_seconds, opt_seconds});

    StepMetrics mt;
    mt.step = step + 1;
    mt.loss = loss;
    mt.lr = lr;
    mt.grad_norm = grad_norm;
    mt.ms_per_step = sec * 1e3;
    mt.tokens_per_s = double(tokens_per_step) / sec;
    const bool last = step + 1 == tc.steps;
    if (val_sampler && ((tc.eval_interval > 0 && mt.step % tc.eval_interval == 0) || last)) {
      // Validation batches are dealt round-robin to the data-parallel replicas.
      const int mine = (tc.eval_batches - me.dp + layout.dp() - 1) / layout.dp();
      const BatchFill val_fill = [&](int k, int32_t* x, int32_t* y) {
        val_sampler->fill(int64_t{k} * layout.dp() + me.dp, B, x, y);
      };
      double val = executor.evaluate(mine, val_fill);
      val = owns_loss ? val : 0.0;
      world.allreduce(&val, 1, DType::kFloat64)->wait();
      mt.val_loss = val / tc.eval_batches;
    }
    if (metrics) metrics->write(mt);
    if (mt.step % config.logging.interval == 0 || last || mt.step == 1 || mt.val_loss)
      log::info(format_progress(mt, tc.steps));
    summary.losses.push_back(loss);
    summary.grad_norms.push_back(grad_norm);
    summary.final_loss = loss;
    if (mt.val_loss) summary.final_val_loss = mt.val_loss;
  }
  summary.steps = tc.steps;
  summary.tokens_per_s = double(tokens_per_step) * double(tc.steps) / train_seconds;
  if (on_finish) on_finish(stage);
  return summary;
}

}  // namespace feast
