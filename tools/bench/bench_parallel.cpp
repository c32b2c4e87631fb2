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
#include "cli/cli_args.h"
#include "config/config.h"
#include "config/layout_plan.h"
#include "tools/bench/shared_temp_dir.h"
#include "core/log.h"
#include "core/plural.h"
#include "core/timer.h"
#include "data/prepare.h"
#include "train/train_loop.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: mpirun -np N trainer bench --parallel [--layouts tpApBdC,...] [--steps N] [--warmup N]\n"
    "                                  [--layers L] [--heads H] [--embd C] [--seq T] [--batch S]\n"
    "                                  [--micro-batch B] [--micro-batches M,...] [--zero 0|1|2]\n"
    "                                  [--schedule 1f1b|gpipe]\n"
    "Prints the world's all-reduce bandwidth (as `trainer bench comm --ops allreduce`), then for\n"
    "each layout (default: every tp, pp, dp in {1, 2, 4, 8} with tp * pp * dp = N) the median\n"
    "tokens/s and the split of step time into compute, tensor-parallel communication,\n"
    "data-parallel communication, pipeline idle, data loading and the optimizer, averaged over\n"
    "ranks; the pipeline's measured bubble (idle / (compute + tp-comm + pp-idle + data), the\n"
    "forward-backward span) next to the formula (p-1)/(m+p-1) for m micro-batches per replica;\n"
    "and E = compute / (compute + tp-comm + dp-comm + pp-idle). The model defaults to the demo's\n"
    "(4 layers, 4 heads, 128 channels, byte vocabulary) at sequence 64 and a global batch of 32\n"
    "sequences. --micro-batches runs each layout once per M micro-batches of --micro-batch\n"
    "sequences per data-parallel replica (the global batch is then dp * M * B, not --batch).\n";

struct Layout {
  int tp, pp, dp;
  std::string name() const {
    return "tp" + std::to_string(tp) + "pp" + std::to_string(pp) + "dp" + std::to_string(dp);
  }
};

int positive(const std::string& flag, const std::string& v) { return parse_positive_int(flag, v, kUsage); }

std::vector<Layout> parse_layouts(const std::string& s) {
  std::vector<Layout> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    Layout l{};
    if (std::sscanf(item.c_str(), "tp%dpp%ddp%d", &l.tp, &l.pp, &l.dp) != 3 || l.tp < 1 || l.pp < 1 || l.dp < 1)
      throw ConfigError("--layouts: '" + item + "' is not tpApBdC (for example tp2pp2dp2)\n" + kUsage);
    out.push_back(l);
    pos = comma + 1;
  }
  return out;
}

std::vector<int> parse_counts(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    out.push_back(positive(flag, s.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

// One run's config: `base` at layout `l`, with `micro` micro-batches per replica (0: as the
// global batch divides).
Config run_config(const Config& base, const Layout& l, int micro, int steps) {
  Config c = base;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.dp = l.dp;
  for (const char* key : {"parallel.tp", "parallel.pp", "parallel.dp"}) c.origin[key] = "bench layout " + l.name();
  c.training.steps = steps;
  if (micro > 0) {
    c.training.batch_size = 0;  // dp x m x micro-batch
    c.parallel.num_micro_batches = micro;
    c.origin["parallel.num_micro_batches"] = "bench --micro-batches";
  }
  return c;
}

}  // namespace

int bench_parallel_command(const std::vector<std::string>& args, std::unique_ptr<Communicator> world) {
  Config base;
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
  int steps = 10, warmup = 2;
  std::vector<Layout> layouts;
  std::vector<int> micro_batches;  // empty: as --batch divides
  // Errors about the keys the flags set name the flag, given or left at its default.
  static const std::map<std::string, std::vector<std::string>> kFlagKeys = {
      {"--layers", {"model.n_layer"}},       {"--heads", {"model.n_head"}},
      {"--embd", {"model.n_embd"}},          {"--seq", {"training.seq_len", "model.max_seq_len"}},
      {"--batch", {"training.batch_size"}}, {"--micro-batch", {"parallel.micro_batch_size"}}};
  for (const auto& [flag, keys] : kFlagKeys)
    for (const std::string& key : keys) base.origin[key] = "bench " + flag + " (default " + config_value(base, key) + ")";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--parallel") continue;
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    }
    const std::string& v = option_value(args, i,
                                        {"--layouts", "--steps", "--warmup", "--layers", "--heads", "--embd", "--seq",
                                         "--batch", "--micro-batch", "--micro-batches", "--zero", "--schedule"},
                                        "bench", kUsage);
    if (a == "--layouts") layouts = parse_layouts(v);
    else if (a == "--steps") steps = positive(a, v);
    else if (a == "--warmup") warmup = positive(a, v);
    else if (a == "--layers") base.model.n_layer = positive(a, v);
    else if (a == "--heads") base.model.n_head = positive(a, v);
    else if (a == "--embd") base.model.n_embd = positive(a, v);
    else if (a == "--seq") base.training.seq_len = base.model.max_seq_len = positive(a, v);
    else if (a == "--batch") base.training.batch_size = positive(a, v);
    else if (a == "--micro-batch") base.parallel.micro_batch_size = positive(a, v);
    else if (a == "--micro-batches") micro_batches = parse_counts(a, v);
    else if (a == "--zero") {
      if (v != "0" && v != "1" && v != "2") throw ConfigError("bench: --zero " + v + ": expected 0, 1 or 2\n" + kUsage);
      base.parallel.zero_stage = v[0] - '0';
    } else if (a == "--schedule") base.parallel.schedule = v;
    if (const auto it = kFlagKeys.find(a); it != kFlagKeys.end())
      for (const std::string& key : it->second) base.origin[key] = "bench " + a + " " + v;
  }
  const int n = world->size();
  if (layouts.empty()) {
    std::vector<std::string> skipped;
    for (int tp : {1, 2, 4, 8})
      for (int pp : {1, 2, 4, 8}) {
        if (n % (tp * pp) != 0) continue;  // not a layout of this world
        const std::string name = Layout{tp, pp, n / (tp * pp)}.name();
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
  // is made again when it runs, with the data prepared meanwhile.)
  std::vector<std::pair<Layout, int>> runs;
  for (const Layout& l : layouts) {
    if (micro_batches.empty()) runs.push_back({l, 0});
    for (int m : micro_batches) runs.push_back({l, m});
  }
  for (const auto& [l, micro] : runs) {
    try {
      plan_layout(run_config(base, l, micro, warmup + steps), n);
    } catch (const ConfigError& e) {
      throw ConfigError("bench --parallel: layout " + l.name() +
                        (micro > 0 ? " with " + std::to_string(micro) + " micro-batches" : "") + " on " +
                        count_of(n, "rank") + ": " + e.what());
    }
  }

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
      PrepareOptions o;
      o.out_dir = scratch.path();
      prepare_synthetic(400'000, 1, o);
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
            std::to_string(base.parallel.zero_stage) + ", " + base.parallel.schedule + "; " + std::to_string(steps) +
            " timed steps after " + std::to_string(warmup) + "; time split averaged over ranks");
  log::info("bubble = pp-idle / (compute + tp-comm + pp-idle + data), the pipeline's share of idle, against");
  log::info("formula = (p-1)/(m+p-1), m micro-batches per replica; E = compute / (compute + tp-comm + dp-comm + pp-idle)");
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
                  100 * sum.pipeline_idle_fraction(), 100 * pipeline_idle_formula(l.pp, m), 100 * sum.efficiency(),
                  hidden);
    log::info(line);
  }
  return 0;
}

}  // namespace feast
