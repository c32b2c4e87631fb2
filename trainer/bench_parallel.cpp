#include "trainer/bench_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/agreement.h"
#include "trainer/cli_args.h"
#include "trainer/shared_temp_dir.h"
#include "core/log.h"
#include "core/plural.h"
#include "core/timer.h"
#include "data/prepare.h"
#include "trainer/train_loop.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: mpirun -np N trainer bench --parallel [--layouts tpApBdC,...] [--steps N] [--warmup N]\n"
    "                                  [--layers L] [--heads H] [--embd C] [--seq T] [--batch S]\n"
    "                                  [--micro-batch B] [--zero 0|1|2] [--schedule 1f1b|gpipe]\n"
    "Prints the world's all-reduce bandwidth, then for each layout (default: every tp, pp, dp in\n"
    "{1, 2, 4, 8} with tp * pp * dp = N) the median tokens/s and the split of step time into\n"
    "compute, tensor-parallel communication, data-parallel communication, pipeline idle and the\n"
    "optimizer, averaged over ranks. The model defaults to the demo's (4 layers, 4 heads, 128\n"
    "channels, byte vocabulary) at sequence 64 and a global batch of 32 sequences.\n";

struct Layout {
  int tp, pp, dp;
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

// All-reduce bandwidth of the world, nccl-tests style: algbw = bytes / time, busbw = algbw *
// 2 (n - 1) / n (the bytes each rank's link must carry in a ring).
void bench_allreduce(Communicator& world) {
  const int n = world.size();
  log::info("all-reduce over the world (" + count_of(n, "rank") + "), float32 sum, median of 10:");
  log::info("      bytes    time (us)   algbw (GB/s)   busbw (GB/s)   check");
  for (size_t bytes = 4096; bytes <= (size_t(16) << 20); bytes *= 8) {
    std::vector<float> buf(bytes / 4);
    std::vector<double> times;
    bool ok = true;
    for (int it = 0; it < 12; ++it) {
      std::fill(buf.begin(), buf.end(), float(world.rank() + 1));
      world.barrier();
      Timer t;
      world.allreduce(buf.data(), buf.size(), DType::kFloat32)->wait();
      if (it >= 2) times.push_back(t.seconds());
      ok = ok && buf.front() == float(n * (n + 1) / 2) && buf.back() == buf.front();
    }
    std::sort(times.begin(), times.end());
    const double s = times[times.size() / 2];
    const double algbw = double(bytes) / s / 1e9;
    char line[160];
    std::snprintf(line, sizeof line, "%11zu %12.1f %14.3f %14.3f   %s", bytes, s * 1e6, algbw,
                  algbw * 2.0 * (n - 1) / std::max(1, n), ok ? "ok" : "WRONG");
    log::info(line);
    if (!ok) throw Error("bench: all-reduce returned a wrong sum");
  }
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
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--parallel") continue;
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    }
    if (i + 1 >= args.size()) throw ConfigError("bench: " + a + " needs a value (or is unknown)\n" + kUsage);
    const std::string& v = args[++i];
    if (a == "--layouts") layouts = parse_layouts(v);
    else if (a == "--steps") steps = positive(a, v);
    else if (a == "--warmup") warmup = positive(a, v);
    else if (a == "--layers") base.model.n_layer = positive(a, v);
    else if (a == "--heads") base.model.n_head = positive(a, v);
    else if (a == "--embd") base.model.n_embd = positive(a, v);
    else if (a == "--seq") base.training.seq_len = base.model.max_seq_len = positive(a, v);
    else if (a == "--batch") base.training.batch_size = positive(a, v);
    else if (a == "--micro-batch") base.parallel.micro_batch_size = positive(a, v);
    else if (a == "--zero" && (v == "0" || v == "1" || v == "2")) base.parallel.zero_stage = v[0] - '0';
    else if (a == "--schedule") base.parallel.schedule = v;
    else throw ConfigError("bench: unknown option '" + a + "'\n" + kUsage);
    if (a == "--layers" || a == "--heads" || a == "--embd" || a == "--seq" || a == "--batch" || a == "--micro-batch") {
      // Errors about the keys these flags set name the flag the user gave.
      static const std::map<std::string, std::vector<std::string>> keys = {
          {"--layers", {"model.n_layer"}},       {"--heads", {"model.n_head"}},
          {"--embd", {"model.n_embd"}},          {"--seq", {"training.seq_len", "model.max_seq_len"}},
          {"--batch", {"training.batch_size"}}, {"--micro-batch", {"parallel.micro_batch_size"}}};
      for (const std::string& key : keys.at(a)) base.origin[key] = "bench " + a + " " + v;
    }
  }
  const int n = world->size();
  if (layouts.empty()) {
    std::vector<std::string> skipped;
    for (int tp : {1, 2, 4, 8})
      for (int pp : {1, 2, 4, 8}) {
        if (n % (tp * pp) != 0) continue;  // not a layout of this world
        const std::string name = "tp" + std::to_string(tp) + "pp" + std::to_string(pp) + "dp" + std::to_string(n / (tp * pp));
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

  bench_allreduce(*world);

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

  log::info("\ntraining: " + std::to_string(base.model.n_layer) + " layers, " + std::to_string(base.model.n_embd) +
            " channels, sequence " + std::to_string(base.training.seq_len) + ", global batch " +
            std::to_string(base.training.batch_size) + " x micro-batch " +
            std::to_string(base.parallel.micro_batch_size) + ", ZeRO " + std::to_string(base.parallel.zero_stage) + ", " +
            base.parallel.schedule + "; " + std::to_string(steps) + " timed steps after " + std::to_string(warmup) +
            "; time split averaged over ranks");
  log::info("layout          ranks   tokens/s    ms/step   compute   tp-comm   dp-comm   pp-idle   optim   other");
  for (const Layout& l : layouts) {
    Config c = base;
    c.parallel.tp = l.tp;
    c.parallel.pp = l.pp;
    c.parallel.dp = l.dp;
    c.training.steps = warmup + steps;
    TrainSummary s;
    {
      const log::Quiet quiet;  // the table is the output, not each run's progress
      s = train(c, world->split(0, world->rank(), "world"));
    }
    if (s.ended == "interrupted" || s.ended == "preempted") {
      log::info("bench: " + s.ended + "; the temporary data is removed");
      return s.exit_code;
    }
    // Sums over the timed steps, then averaged over ranks.
    // total, compute, tp-comm, dp-comm, pp-idle, optimizer
    double parts[6] = {};
    std::vector<double> totals;
    for (size_t i = size_t(warmup); i < s.timings.size(); ++i) {
      const StepTiming& t = s.timings[i];
      const double v[6] = {t.total,   t.stage.compute, t.stage.tp_comm, t.dp_comm, t.stage.pp_wait + t.stage.send_wait,
                           t.optimizer};
      for (int k = 0; k < 6; ++k) parts[k] += v[k];
      totals.push_back(t.total);
    }
    world->allreduce(parts, 6, DType::kFloat64)->wait();
    std::sort(totals.begin(), totals.end());
    const double med = totals[totals.size() / 2];
    const double tokens = double(c.training.batch_size) * c.training.seq_len;
    auto pct = [&](int k) { return 100.0 * parts[k] / parts[0]; };
    const double other = 100.0 - pct(1) - pct(2) - pct(3) - pct(4) - pct(5);
    char name[32], line[200];
    std::snprintf(name, sizeof name, "tp%d pp%d dp%d", l.tp, l.pp, l.dp);
    std::snprintf(line, sizeof line, "%-14s %6d %10.0f %10.1f %8.1f%% %8.1f%% %8.1f%% %8.1f%% %6.1f%% %6.1f%%", name, n,
                  tokens / med, med * 1e3, pct(1), pct(2), pct(3), pct(4), pct(5), other);
    log::info(line);
  }
  return 0;
}

}  // namespace feast
