// `trainer plan CONFIG --gpus N`: the command line of the planner; the predictions and their
// report live in plan/.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "backend/backend.h"
#include "cli/verb.h"
#include "comm/topology/cpu_threads.h"
#include "config/config.h"
#include "core/error.h"
#include "cli/plan_calibrate.h"
#include "cli/plan_verify.h"
#include "core/log.h"
#include "plan/machine_constants.h"
#include "plan/plan_report.h"

namespace feast {

namespace {

int run_plan(const Args& args, const VerbContext&) {
  if (args.config_path().empty()) throw ConfigError("plan: name a config file (trainer plan --help)");
  if (!args.has("--gpus")) throw ConfigError("plan: --gpus N is required: the GPUs (ranks) to plan for (trainer plan --help)");
  const Config config = load_config(args.config_path(), args.overrides());
  const std::string constants_path = args.text("--constants", default_constants_path());
  // The ranks that share a host in such a run, and the threads each of them gets.
  const int gpus = int(args.integer("--gpus", 1));
  const int ranks_per_node = std::min(gpus, int(args.integer("--gpus-per-node", 8)));
  const int threads = args.has("--threads")        ? int(args.integer("--threads", 1))
                      : config.training.threads > 0 ? config.training.threads
                                                    : thread_policy(ranks_per_node).threads;
  if (args.flag("--calibrate"))
    return calibrate_plan(config, CalibrateRequest{ranks_per_node, threads, args.number("--seconds", 20), constants_path});

  PlanRequest r;
  r.config_path = args.config_path();
  Cluster& cl = r.options.cluster;
  cl.gpus = gpus;
  // This machine's figures (trainer plan --calibrate) where the flags leave them, if measured
  // here for this run's device; else the defaults. The heading says which.
  const ConstantsChoice figures = choose_machine_constants(constants_path, config.training.device);
  r.figures = figures.said;
  if (figures.used) {
    cl.tflops = figures.used->tflops;
    if (figures.used->link) cl.intra_node = cl.inter_node = *figures.used->link;  // one host's link: all it knows
  }
  std::vector<std::string> flagged;
  for (const char* f : {"--gpu-tflops", "--intra-node-bw", "--inter-node-bw", "--latency"})
    if (args.has(f)) flagged.push_back(f);
  if (!flagged.empty()) {
    std::string list;
    for (const std::string& f : flagged) list += (list.empty() ? "" : ", ") + f;
    r.figures = list + " from the command line; the rest: " + r.figures;
  }
  cl.gpu_memory = args.number("--gpu-memory", cl.gpu_memory);
  cl.gpus_per_node = int(args.integer("--gpus-per-node", cl.gpus_per_node));
  cl.intra_node.bandwidth = args.number("--intra-node-bw", cl.intra_node.bandwidth);
  cl.inter_node.bandwidth = args.number("--inter-node-bw", cl.inter_node.bandwidth);
  cl.intra_node.latency = cl.inter_node.latency = args.number("--latency", cl.intra_node.latency);
  cl.tflops = args.number("--gpu-tflops", cl.tflops);
  r.mttf_hours = args.number("--mttf-hours", r.mttf_hours);
  r.checkpoint_seconds = args.number("--checkpoint-seconds", r.checkpoint_seconds);
  r.checkpoint_bw = args.number("--checkpoint-bw", r.checkpoint_bw);
  r.top = int(args.integer("--top", r.top));
  r.why = args.flag("--why");
  r.json = args.flag("--json");
  MemoryOptions& memory = r.options.memory;
  // The run's own compute dtype unless --dtype says otherwise; bf16 means a GPU.
  r.dtype_given = args.has("--dtype");
  if (r.dtype_given)
    memory.dtype = args.text("--dtype") == "fp32" ? PlanDType::kFp32 : PlanDType::kBf16;
  else
    memory.dtype = compute_dtype_for(config.training.device, config.training.dtype) == DType::kFloat32
                       ? PlanDType::kFp32
                       : PlanDType::kBf16;
  memory.gpu = config.training.device == "cuda" || memory.dtype == PlanDType::kBf16;
  // The threads a CPU run would use (each holds attention scratch): training.threads, else what
  // the thread policy gives the ranks of one node (--gpus-per-node) on a machine like this one,
  // as the run itself decides.
  memory.threads = threads;
  // ZeRO 3 holds parameters in pages: the CPU's (4 KiB), or the 2 MiB in which CUDA maps
  // virtual memory on current GPUs.
  memory.page_bytes = memory.gpu ? size_t{2} << 20 : size_t(sysconf(_SC_PAGESIZE));
  const std::optional<LayoutEstimate> best = print_plan(config, r);
  const std::string write_path = args.text("--write", "");
  const bool verify = args.flag("--verify");
  if (write_path.empty() && !verify) return 0;
  if (!best) throw ConfigError("plan: no layout of this config is valid on " + std::to_string(gpus) +
                               " GPUs, so there is none to write or verify (--why says why)");

  // The chosen layout as a config the trainer runs as is: every key, the chosen ones marked.
  Config chosen = config_for_layout(config, best->layout, global_batch_sequences(config, gpus));
  for (auto& [key, from] : chosen.origin)
    if (from == "tried by trainer plan") from = "chosen by trainer plan";
  std::string file = write_path;
  std::string work;
  if (verify) {
    char dir[] = "/tmp/feast-plan-verify-XXXXXX";
    if (!mkdtemp(dir)) throw Error("plan --verify: cannot make a directory under /tmp");
    work = dir;
    if (file.empty()) file = work + "/chosen.toml";
  }
  std::ofstream out(file);
  out << to_toml(chosen);
  out.close();
  if (!out) throw ConfigError("--write " + file + ": cannot write the chosen config there");
  log::note("plan: wrote " + file + ": " + best->layout.name() + " (run it: mpirun -np " + std::to_string(gpus) +
            " trainer " + file + ")");
  if (verify) return verify_plan(chosen, *best, VerifyRequest{file, work, gpus, r.options, figures.used.has_value() && flagged.empty()});
  return 0;
}

}  // namespace

Verb plan_verb() {
  Verb v;
  v.name = "plan";
  v.summary = "predict every layout's memory and step time on N GPUs before a run";
  v.single_process = true;
  CommandLine& c = v.command_line;
  c.verb = "plan";
  c.synopsis = "trainer plan CONFIG.toml --gpus N [options] [--set section.key=value ...]";
  c.description =
      "Predicts, for every layout of the config on N GPUs (tp x pp x dp = N, ZeRO stage 0 to 3, every\n"
      "micro-batch split of the global batch, training.recompute none/selective/full, with and\n"
      "without parallel.offload_optimizer), the memory per GPU, the step time split into compute,\n"
      "tensor-parallel communication, pipeline idle and exposed data-parallel communication, tokens/s\n"
      "and E = compute / step; drops layouts that do not fit and prints the best first, then the\n"
      "faster layouts that do not fit and why (none fitting is an error naming --gpu-memory). Then the\n"
      "cluster MTTF and the Young/Daly checkpoint interval. docs/planner.md has the formulas.\n"
      "Times use this machine's figures when `--calibrate` has measured them here (the heading says\n"
      "which figures a plan used), else an H100 SXM node's; flags override either.";
  c.takes_config = true;
  c.options = {
      {"--gpus", ValueKind::kInteger, "N", "GPUs (ranks) in the job (required)", {}, 1},
      {"--gpu-memory", ValueKind::kSize, "SIZE", "memory per GPU (default 80GiB)"},
      {"--gpus-per-node", ValueKind::kInteger, "N",
       "GPUs per node: groups within a node use the intra-node link (default 8)", {}, 1},
      {"--intra-node-bw", ValueKind::kBandwidth, "BW", "per-GPU bandwidth within a node, one direction (default 450GB/s)"},
      {"--inter-node-bw", ValueKind::kBandwidth, "BW", "per-GPU bandwidth between nodes (default 50GB/s = 400Gb/s)"},
      {"--latency", ValueKind::kDuration, "TIME", "start-up cost of one message, both links (default 5us)"},
      {"--gpu-tflops", ValueKind::kNumber, "X",
       "ACHIEVED TFLOP/s per GPU on the model's 6N + 6LTC count (default: this\n"
       "machine's, measured by --calibrate, else 400, about 40% of an H100 SXM's\n"
       "989 dense bf16 peak)",
       {}, 1e-9},
      {"--dtype", ValueKind::kText, "fp32|bf16",
       "fp32: float32 throughout; bf16: mixed precision on a GPU (default: the run's\n"
       "own, from training.device and training.dtype)",
       {"fp32", "bf16"}},
      {"--threads", ValueKind::kInteger, "N",
       "OpenMP threads per rank (fp32: the CPU attention scratch; default\n"
       "training.threads, else as one node's ranks on a machine like this one would\n"
       "choose them)",
       {}, 1, 1024},
      {"--mttf-hours", ValueKind::kNumber, "H", "mean time to failure of ONE GPU (default 50000)", {}, 1e-9},
      {"--checkpoint-seconds", ValueKind::kNumber, "C",
       "time to save a checkpoint (default: its size / --checkpoint-bw;\n"
       "`trainer bench checkpoint --dir DIR` measures it)",
       {}, 1e-9},
      {"--checkpoint-bw", ValueKind::kBandwidth, "BW", "write bandwidth for that estimate (default 2GB/s)"},
      {"--top", ValueKind::kInteger, "K", "rows to print (default 10)", {}, 1},
      {"--why", ValueKind::kFlag, "", "also list every dropped layout and why"},
      {"--json", ValueKind::kFlag, "", "print every layout as a JSON array instead"},
      {"--write", ValueKind::kText, "FILE",
       "write the fastest layout that fits (the table's first row) as a config that\n"
       "`mpirun -np N trainer FILE` runs as is"},
      {"--verify", ValueKind::kFlag, "",
       "run that layout here for 3 steps (mpiexec -np N, or $FEAST_MPIEXEC) and print\n"
       "each rank's predicted and measured memory, and the step time (compare it\n"
       "with figures --calibrate measured on this machine)"},
      {"--calibrate", ValueKind::kFlag, "",
       "measure this machine's figures instead of planning (about a minute): the\n"
       "config's model's achieved TFLOP/s at one rank's micro-batch and threads (as\n"
       "--gpus and --gpus-per-node ranks share this host), and on the CPU the link\n"
       "between two ranks (trainer bench comm through mpiexec, or $FEAST_MPIEXEC);\n"
       "written to the constants file, which later plans on this machine use"},
      {"--seconds", ValueKind::kNumber, "S", "with --calibrate: the compute measurement's budget (default 20)", {}, 1e-3},
      {"--constants", ValueKind::kText, "FILE",
       "this machine's figures (default $FEAST_PLAN_CONSTANTS, else\n"
       "$XDG_CACHE_HOME or ~/.cache, /feast/plan-constants.json); used when it was\n"
       "measured on this machine for the config's training.device; flags override it"},
  };
  c.epilogue = "Sizes: 80GiB, 141GB, 512MiB. Bandwidths: 450GB/s, 400Gb/s (bits), 25GiB/s. Times: 5us, 1.5ms, 2s.";
  v.run = run_plan;
  return v;
}

}  // namespace feast
