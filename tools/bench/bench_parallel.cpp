#include "tools/bench/bench_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "comm/agreement.h"
#include "tools/bench/bench_comm.h"
#include "config/config.h"
#include "config/layout_plan.h"
#include "config/validate.h"
#include "tools/bench/shared_temp_dir.h"
#include "core/log.h"
#include "core/plural.h"
#include "core/timer.h"
#include "data/prepare.h"
#include "train/train_loop.h"

namespace feast {
namespace {

// One run's config: `base` at layout `l`, with `micro` micro-batches per replica (0: as the
// global batch divides).
Config run_config(const Config& base, const BenchLayout& l, int micro, int steps) {
  Config c = base;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.dp = l.dp;
  for (const char* key : {"parallel.tp", "parallel.pp", "parallel.dp"}) c.origin[key] = "bench layout " + l.name();
  // Sequence parallelism splits over tp: asked for, it applies where tp > 1.
  c.parallel.sequence_parallel = base.parallel.sequence_parallel && l.tp > 1;
  c.origin["parallel.sequence_parallel"] = "bench --sequence-parallel";
  c.training.steps = steps;
  if (micro > 0) {
    c.training.batch_size = 0;  // dp x m x micro-batch
    c.parallel.num_micro_batches = micro;
    c.origin["parallel.num_micro_batches"] = "bench --micro-batches";
  }
  return c;
}

}  // namespace

ParallelBenchOptions::ParallelBenchOptions() {
  base.model.n_layer = 4;
  base.model.n_head = 4;
  base.model.n_embd = 128;
  base.model.vocab_size = 256;
  base.model.max_seq_len = 128;
  base.training.seq_len = 64;
  base.training.batch_size = 32;
  base.training.lr = 1e-3;
  base.training.eval_interval = 0;
  base.parallel.micro_batch_size = 4;
  base.logging.interval = 1000000;
}

int run_parallel_bench(const ParallelBenchOptions& o, std::unique_ptr<Communicator> world) {
  Config base = o.base;
  const int steps = o.steps, warmup = o.warmup;
  std::vector<BenchLayout> layouts = o.layouts;
  const std::vector<int>& micro_batches = o.micro_batches;
  const int n = world->size();
  if (layouts.empty()) {
    std::vector<std::string> skipped;
    for (int tp : {1, 2, 4, 8})
      for (int pp : {1, 2, 4, 8}) {
        if (n % (tp * pp) != 0) continue;  // not a layout of this world
        const std::string name = BenchLayout{tp, pp, n / (tp * pp)}.name();
        if (pp > base.model.n_layer)
          skipped.push_back(name + " (pp " + std::to_string(pp) + " > " + std::to_string(base.model.n_layer) + " layers)");
        else if (base.model.n_head % tp != 0)
          skipped.push_back(name + " (tp " + std::to_string(tp) + " does not divide " + std::to_string(base.model.n_head) +
                            " heads)");
        else
          layouts.push_back({tp, pp, n / (tp * pp)});
      }
    for (const std::string& why : skipped) log::info("bench: skipping " + why);
  }
  // One run per layout and micro-batch count (the count the batch gives when none are listed),
  // each checked by the trainer's own rules now, before minutes of benchmarking. (Its config
  // is made again when it runs, with the data prepared meanwhile.) A layout asked for that the
  // trainer refuses stops the bench; one of the default list (a schedule that cannot run at
  // pp 1, say) is skipped with the trainer's reason.
  const bool listed = !o.layouts.empty();
  std::vector<std::pair<BenchLayout, int>> runs;
  for (const BenchLayout& l : layouts)
    for (int micro : micro_batches.empty() ? std::vector<int>{0} : micro_batches) {
      const std::string what =
          "layout " + l.name() + (micro > 0 ? " with " + std::to_string(micro) + " micro-batches" : "");
      try {
        const Config c = run_config(base, l, micro, warmup + steps);
        validate_config(c);
        plan_layout(c, n);
      } catch (const ConfigError& e) {
        if (listed) throw ConfigError("bench parallel: " + what + " on " + count_of(n, "rank") + ": " + e.what());
        log::info("bench: skipping " + what + ": " + e.what());
        continue;
      }
      runs.push_back({l, micro});
    }
  if (runs.empty())
    throw ConfigError("bench parallel: no layout of " + count_of(n, "rank") + " can run (the lines above say why)");

  {
    CommBenchOptions comm;
    comm.min_bytes = 4096;
    comm.max_bytes = size_t(16) << 20;
    comm.factor = 8;
    comm.ops = {CommOp::kAllreduce};
    comm.algorithms = false;
    run_comm_bench(comm, *world);
  }

  // The data: the synthetic corpus, prepared once by rank 0 in a directory every rank reads,
  // removed however the bench ends (an error unwinds through here; Ctrl-C during a layout's
  // training stops it cleanly, and the loop below stops).
  const SharedTempDir scratch(*world, "feast_bench");
  std::string error;
  if (world->rank() == 0) {
    try {
      PrepareOptions data;
      data.out_dir = scratch.path();
      prepare_synthetic(400'000, 1, data);
    } catch (const std::exception& e) {
      error = std::string("bench: preparing the synthetic corpus failed: ") + e.what();
    }
  }
  agree_on_error(*world, error);
  base.data.train = scratch.path() + "/train_*.bin";
  base.logging.dir = scratch.path() + "/run";
  base.checkpoint.resume = "never";

  const std::string batch = micro_batches.empty()
                                ? "global batch " + std::to_string(base.training.batch_size) + " x micro-batch " +
                                      std::to_string(base.parallel.micro_batch_size)
                                : "global batch dp x m x " + std::to_string(base.parallel.micro_batch_size);
  log::info("training: " + std::to_string(base.model.n_layer) + " layers, " + std::to_string(base.model.n_embd) +
            " channels, sequence " + std::to_string(base.training.seq_len) + ", " + batch + ", ZeRO " +
            std::to_string(base.parallel.zero_stage) + ", " + base.parallel.schedule +
            (base.parallel.sequence_parallel ? ", sequence parallelism where tp > 1" : "") + "; " +
            std::to_string(steps) +
            " timed steps after " + std::to_string(warmup) + "; time split averaged over ranks");
  log::info("bubble = pp-idle / (compute + tp-comm + pp-idle + data), the pipeline's share of idle, against");
  const ScheduleKind schedule = parse_schedule_kind(base.parallel.schedule);
  log::info(std::string("formula = ") + idle_fraction_formula_text(schedule) + " (" + base.parallel.schedule +
            "), m micro-batches per replica; E = compute / (compute + tp-comm + dp-comm + pp-idle)");
  log::info("dp-hidden = 1 - exposed / in flight of the gradient reductions, both averaged over ranks: the share "
            "the ranks, on average, did not wait for");
  log::info("layout          m ranks   tokens/s   ms/step  compute  tp-comm  dp-comm  pp-idle    data   optim   other"
            "   bubble  formula       E  dp-hidden");
  for (const auto& [l, micro] : runs) {
    const Config c = run_config(base, l, micro, warmup + steps);
    const int m = c.micro_batches_per_rank(l.dp);
    TrainSummary s;
    {
      const log::Quiet quiet;  // the table is the output, not each run's progress
      s = train(c, world->split(0, world->rank(), "world"));
    }
    if (s.ended == "interrupted" || s.ended == "preempted") {
      log::info("bench: " + s.ended + "; the temporary data is removed");
      return s.exit_code;
    }
    // The run's own split of every step (averaged over ranks), summed over the timed steps.
    TimeSplit sum;
    std::vector<double> totals;
    for (size_t i = size_t(warmup); i < s.splits.size(); ++i) {
      sum += s.splits[i];
      totals.push_back(s.splits[i].total);
    }
    const double med = median(totals);
    const double tokens = double(l.dp) * m * c.parallel.micro_batch_size * c.training.seq_len;
    auto pct = [&](double part) { return 100.0 * part / sum.total; };
    char name[32], hidden[16], line[280];
    std::snprintf(name, sizeof name, "tp%d pp%d dp%d", l.tp, l.pp, l.dp);
    if (sum.dp_reduce > 0)
      std::snprintf(hidden, sizeof hidden, "%.1f%%",
                    100 * std::clamp(1 - sum.dp_reduce_exposed / sum.dp_reduce, 0.0, 1.0));
    else
      std::snprintf(hidden, sizeof hidden, "-");  // no data-parallel reductions at this layout
    std::snprintf(line, sizeof line,
                  "%-14s %2d %5d %10.0f %9.1f %7.1f%% %7.1f%% %7.1f%% %7.1f%% %6.1f%% %6.1f%% %6.1f%% %7.1f%% %7.1f%% "
                  "%6.1f%% %10s",
                  name, m, n, tokens / med, med * 1e3, pct(sum.compute), pct(sum.tp_comm), pct(sum.dp_comm),
                  pct(sum.pp_idle), pct(sum.data), pct(sum.optimizer), pct(sum.other),
                  100 * sum.pipeline_idle_fraction(), 100 * idle_fraction_formula(schedule, l.pp, m, c.parallel.virtual_stages),
                  100 * sum.efficiency(),
                  hidden);
    log::info(line);
  }
  return 0;
}

}  // namespace feast
