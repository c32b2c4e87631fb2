#include "train/train_loop.h"

#include <chrono>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "backend/cpu/blas_library.h"
#include "core/error.h"
#include "core/formatted.h"
#include "core/plural.h"
#include "core/io/atomic_file.h"
#include "core/log.h"
#include "core/timer.h"
#include "checkpoint/checkpoint_file.h"
#include "train/checkpointing.h"
#include "config/config_agreement.h"
#include "train/fault_injection.h"
#include "model/flop_count.h"
#include "train/metrics/device_peak.h"
#include "train/metrics/metrics.h"
#include "train/run_directory.h"
#include "train/stop_signals.h"
#include "train/metrics/tensorboard_writer.h"

namespace feast {
namespace {

StopVote my_vote(const StopSignals& signals, const TrainingConfig& tc, const Timer& wall) {
  StopVote v;
  v.interrupt = signals.interrupted();
  v.terminate = signals.terminated();
  v.time_limit = tc.exit_after_minutes > 0 && wall.seconds() >= tc.exit_after_minutes * 60.0;
  return v;
}


// One step's scalars, under the tags `tensorboard --logdir runs/` groups as train/, time/ and val/.
void write_tensorboard(TensorBoardWriter& tb, const StepMetrics& m) {
  const TimeSplit& s = m.split;
  std::vector<std::pair<std::string, double>> values = {
      {"train/loss", m.loss},          {"train/lr", m.lr},
      {"train/grad_norm", m.grad_norm}, {"train/tokens_per_s", m.tokens_per_s},
      {"train/mfu", m.mfu},            {"time/step_s", s.total},
      {"time/compute_s", s.compute},   {"time/tp_comm_s", s.tp_comm},
      {"time/cp_comm_s", s.cp_comm},   {"time/ep_comm_s", s.ep_comm},
      {"time/pp_idle_s", s.pp_idle},   {"time/dp_comm_s", s.dp_comm},
      {"time/optimizer_s", s.optimizer}, {"time/data_s", s.data},
      {"time/other_s", s.other},       {"time/dp_reduce_s", s.dp_reduce},
      {"time/dp_reduce_exposed_s", s.dp_reduce_exposed}, {"time/dp_gather_s", s.dp_gather},
      {"time/dp_gather_exposed_s", s.dp_gather_exposed}, {"time/offload_update_s", s.offload_update},
      {"time/offload_wait_s", s.offload_wait}};
  if (m.val_loss) values.emplace_back("val/loss", *m.val_loss);
  if (m.moe) {
    values.emplace_back("moe/aux_loss", m.moe->aux_loss);
    values.emplace_back("moe/z_loss", m.moe->z_loss);
    values.emplace_back("moe/dropped", m.moe->dropped);
    values.emplace_back("moe/expert_imbalance", expert_imbalance(*m.moe));
  }
  tb.add_scalars(m.step, values);
}

// An earlier run's metrics.jsonl in the directory of a fresh run is moved aside, never
// truncated; returns the new name ("" when there was none).
std::string move_aside_old_metrics(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::file_clock::to_sys(fs::last_write_time(path, ec)));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  const fs::path p(path);
  fs::path aside = p.parent_path() / (p.stem().string() + "." + stamp + p.extension().string());
  for (int n = 2; fs::exists(aside, ec); ++n)
    aside = p.parent_path() / (p.stem().string() + "." + stamp + "-" + std::to_string(n) + p.extension().string());
  fs::rename(path, aside, ec);
  return ec ? "" : aside.string();
}


// The run itself, in a settled run directory (train() below wraps it).
TrainSummary train_in(const Config& config, const LayoutPlan& plan, std::unique_ptr<Communicator> world,
                      const TrainHooks& hooks, RunDirectory& run_dir) {
  const TrainingConfig& tc = config.training;
  const Timer wall;  // exit_after_minutes counts from the start, set-up included
  const StopSignals signals;
  TrainingRun run(config, plan, std::move(world));
  const std::optional<CheckpointMeta> resumed = start_from_checkpoint_or_import(run, config);

  std::optional<MetricsWriter> metrics;
  std::optional<TensorBoardWriter> tensorboard;  // rank 0, with logging.tensorboard
  if (run.world().rank() == 0) {
    std::filesystem::create_directories(config.logging.dir);
    const ParallelLayout& layout = run.plan().layout;
    const std::string resolved = config.logging.dir + "/config.toml";
    std::ofstream out(resolved);
    out << "# this run: world size " << run.world().size() << " = tp " << layout.tp() << " x pp " << layout.pp()
        << " x dp " << layout.dp() << (layout.cp() > 1 ? " x cp " + std::to_string(layout.cp()) : std::string())
        << "\n"
        << to_toml(with_inferred_values(config, run.inferred()));
    out.close();
    // The file a run is continued from: an empty one (a full disk) must not pass unnoticed.
    if (!out) throw Error(resolved + ": cannot write the resolved config (" + std::strerror(errno) + ")");
    // A resumed run continues the metrics of the run it resumes (the steps after the
    // checkpoint, which it runs again, are replaced); a fresh one never truncates another's.
    if (!resumed) {
      const std::string aside = move_aside_old_metrics(config.logging.dir + "/metrics.jsonl");
      if (!aside.empty())
        log::info("logging.dir " + config.logging.dir + " held an earlier run's metrics.jsonl: kept as " + aside +
                  "; this run writes metrics.jsonl");
    }
    metrics.emplace(config.logging.dir + "/metrics.jsonl", resumed ? std::optional<int64_t>(resumed->step) : std::nullopt);
    if (config.logging.tensorboard) tensorboard.emplace(config.logging.dir + "/tensorboard");
  }

  // What MFU and the summary need: the model's FLOPs, the devices' peak (measured on the CPU, by
  // every rank at once) and every rank's memory.
  RunFacts facts;
  facts.config = &config;
  facts.config_path = config.source;
  facts.world_size = run.world().size();
  facts.tp = run.plan().layout.tp();
  facts.pp = run.plan().layout.pp();
  facts.dp = run.plan().layout.dp();
  facts.cp = run.plan().layout.cp();
  facts.ep = config.parallel.ep;
  facts.micro_batches = run.plan().micro_batches;
  facts.schedule = run.plan().schedule;
  facts.virtual_stages = run.plan().virtual_stages;
  facts.tokens_per_step = run.tokens_per_step();
  facts.parameters = matmul_parameters(config.model);
  facts.flops_per_token = training_flops_per_token(config.model, tc.seq_len, lora_spec(config));
  facts.peak = device_peak(run.world(), tc.device, config.logging.peak_tflops, run.cpu_sharing_ranks());
  if (tc.device == "cpu") facts.cpu_kernels = cpu::describe_blas();
  facts.memory = run.memory_of_ranks();
  RunStatistics stats;
  // A parameter server's bytes, summed over this rank's steps: push, pull, refresh.
  const bool server = config.parallel.dp_sync == "parameter-server";
  double traffic[3] = {0, 0, 0};

  TrainSummary summary;
  summary.first_step = run.state().step;
  if (run.state().step >= tc.steps)
    log::info("already at step " + std::to_string(run.state().step) + " of training.steps = " +
              std::to_string(tc.steps) + "; nothing to train");
  const bool checkpoints = config.checkpoint.interval > 0;
  // What saves will cost on disk, said before the first one: a stop always saves, and a model of
  // a hundred million parameters writes gigabytes each time.
  const double save_bytes = checkpoint_bytes(run.stage().table().logical());
  log::info("checkpoint: a save writes " + human_bytes(save_bytes) + " (weights, master weights and both moments) to " +
            config.checkpoint.dir + (checkpoints ? " every " + count_of(config.checkpoint.interval, "step") : " when a run stops early") +
            "; checkpoint.keep = " + std::to_string(config.checkpoint.keep) + " keeps up to " +
            human_bytes(save_bytes * config.checkpoint.keep) + "; `trainer export` writes the weights alone (" +
            human_bytes(save_bytes / 4) + ")");
  CheckpointSaver saver(run, config);
  double train_seconds = 0;
  const Timer training_wall;  // elapsed and ETA count from the first step
  try {
    while (run.state().step < tc.steps) {
      maybe_inject_fault(config.fault, run.world().rank(), run.state().step + 1);
      const StepResult r = run.step(my_vote(signals, tc, wall));
      train_seconds += r.timing.total;
      if (hooks.after_step) hooks.after_step(run, r);

      StepMetrics mt;
      mt.step = run.state().step;
      mt.loss = r.loss;
      mt.lr = r.lr;
      mt.grad_norm = r.grad_norm;
      mt.moe = r.moe;
      mt.split = mean_over_ranks(run.world(), split_of(r.timing));
      stats.add(mt.split);
      summary.splits.push_back(mt.split);
      if (server) {
        const DpTraffic t = run.dp_bytes_last_step();
        traffic[0] += t.push_bytes;
        traffic[1] += t.pull_bytes;
        traffic[2] += t.refresh_bytes;
      }
      mt.ms_per_step = mt.split.total * 1e3;
      mt.tokens_per_s = double(run.tokens_per_step()) / mt.split.total;
      mt.mfu = mfu(facts.flops_per_token, facts.tokens_per_step, mt.split.total, facts.peak, facts.world_size);
      mt.peak_kind = facts.peak.kind;
      const bool last = mt.step == tc.steps;
      if (tc.eval_interval > 0 && (mt.step % tc.eval_interval == 0 || last)) mt.val_loss = run.validate();
      mt.elapsed_s = training_wall.seconds();
      const int64_t done = mt.step - summary.first_step;
      mt.eta_s = mt.elapsed_s / double(done) * double(tc.steps - mt.step);
      if (metrics) metrics->write(mt);
      if (tensorboard) write_tensorboard(*tensorboard, mt);
      const std::string progress = format_progress(mt, tc.steps);
      // Batch jobs (logging.quiet) print evaluations only; a terminal also gets every step as a
      // status line redrawn in place.
      const bool line_due = mt.step % config.logging.interval == 0 || last || mt.step == summary.first_step + 1;
      if (mt.val_loss || (line_due && !config.logging.quiet)) log::info(progress);
      else if (!config.logging.quiet) log::status(progress);
      summary.losses.push_back(r.loss);
      summary.grad_norms.push_back(r.grad_norm);
      summary.val_losses.push_back(mt.val_loss);
      summary.final_loss = r.loss;
      if (mt.val_loss) summary.final_val_loss = mt.val_loss;

      // Stopping early always saves first, whatever checkpoint.interval says.
      const bool exit_here = tc.exit_at_step > 0 && mt.step == tc.exit_at_step;
      if (r.stop.interrupt) {
        summary.ended = "interrupted";
        summary.exit_code = kExitInterrupted;
      } else if (r.stop.terminate) {
        summary.ended = "preempted";
        summary.exit_code = kExitPreempted;
      } else if (r.stop.time_limit) {
        summary.ended = "time limit";
      } else if (exit_here) {
        summary.ended = "exit_at_step";
      }
      const bool stopping = summary.ended != "finished";
      if (stopping || (checkpoints && (mt.step % config.checkpoint.interval == 0 || last)))
        saver.save(/*finish=*/stopping || last);
      if (stopping) {
        if (r.stop.interrupt) log::info("interrupted at step " + std::to_string(mt.step));
        else if (r.stop.terminate) log::info("stopped by a signal (SIGTERM or SIGUSR1) at step " + std::to_string(mt.step));
        else if (r.stop.time_limit) log::info("training.exit_after_minutes reached at step " + std::to_string(mt.step));
        else log::info("training.exit_at_step reached at step " + std::to_string(mt.step));
        break;
      }
    }
  } catch (const AgreedError&) {
    // Every rank failed alike (a non-finite step, say) and is alive: a checkpoint of an earlier
    // step still being written in the background is worth finishing before the run ends.
    try {
      saver.finish();
    } catch (const std::exception&) {
    }
    throw;
  }
  summary.last_checkpoint = saver.finish();
  summary.steps = run.state().step;
  const int64_t ran = summary.steps - summary.first_step;
  // The same figure as the printed summary's: the ranks' mean step, the first step left out.
  const TimeSplit mean_step = stats.mean();
  summary.tokens_per_s = mean_step.total > 0 ? double(run.tokens_per_step()) / mean_step.total : 0;
  std::optional<ServerTraffic> server_traffic;
  if (server && ran > 0) {  // collective: every rank's bytes, and what the dense exchange moves
    const DpTraffic dense = run.dp_bytes_dense_step();
    double all[5] = {traffic[0], traffic[1], traffic[2], dense.push_bytes, dense.pull_bytes};
    run.world().allreduce(all, 5, DType::kFloat64)->wait();
    const double per_rank_step = 1.0 / (double(run.world().size()) * double(ran));
    server_traffic = ServerTraffic{all[0] * per_rank_step, all[1] * per_rank_step, all[3] / run.world().size(),
                                   all[4] / run.world().size(), all[2] / run.world().size()};
  }
  // Collective: every rank's memory as measured after its steps.
  const std::vector<MemoryBytes> high_water = gather_memory(run.world(), run.memory_high_water());
  if (run.world().rank() == 0) {
    RunOutcome outcome;
    if (ran > 0) outcome.memory_high_water = high_water;
    outcome.server_traffic = server_traffic;
    outcome.ended = summary.ended;
    outcome.first_step = summary.first_step;
    outcome.steps = summary.steps;
    outcome.tokens_seen = run.state().tokens_seen;
    outcome.train_seconds = train_seconds;
    if (ran > 0) outcome.final_loss = summary.final_loss;
    outcome.final_val_loss = summary.final_val_loss;
    outcome.mean_split = mean_step;
    outcome.measured_steps = stats.steps() > 1 ? stats.steps() - 1 : stats.steps();
    for (const std::string& line : format_summary(facts, outcome)) log::info(line);
    write_file_atomically(config.logging.dir + "/summary.json", summary_json(facts, outcome));
  }
  if (hooks.at_end) hooks.at_end(run);
  run_dir.finish(summary.ended == "finished" ? "finished at step " + std::to_string(summary.steps)
                                             : "stopped at step " + std::to_string(summary.steps) + " (" +
                                                   summary.ended + ")");
  return summary;
}

}  // namespace

TrainSummary train(const Config& configured, std::unique_ptr<Communicator> world, const TrainHooks& hooks) {
  Config config = configured;
  // Every rank runs rank 0's config, or a check below would fail on some ranks only and leave
  // the others waiting in the run directory's agreement.
  agree_on_config(*world, config);
  const LayoutPlan plan = check_run(config, world->size());  // a config that cannot run touches no run directory
  RunDirectory run_dir(config, *world);  // settles logging.dir; one run per directory
  try {
    TrainSummary s = train_in(config, plan, std::move(world), hooks, run_dir);
    s.run_dir = config.logging.dir;
    return s;
  } catch (const std::exception& e) {
    run_dir.finish(std::string("failed: ") + e.what());
    throw;
  }
}

}  // namespace feast
