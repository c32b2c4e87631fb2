#include "cli/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "backend/backend.h"
#include "model/flop_count.h"
#include "cli/cli_args.h"
#include "config/config.h"
#include "core/formatted.h"
#include "plan/cost_model.h"
#include "comm/topology/cpu_threads.h"

namespace feast {
namespace {

constexpr const char* kUsage =
    "usage: trainer plan CONFIG.toml --gpus N [options] [--set section.key=value ...]\n"
    "Predicts, for every layout of the config on N GPUs (tp x pp x dp = N, ZeRO stage 0/1/2, every\n"
    "micro-batch split of the global batch), the memory per GPU, the step time split into compute,\n"
    "tensor-parallel communication, pipeline idle and exposed data-parallel communication, tokens/s\n"
    "and E = compute / step; drops layouts that do not fit and prints the best first. Then the\n"
    "cluster MTTF and the Young/Daly checkpoint interval. docs/planner.md has the formulas.\n"
    "  --gpus N                  GPUs (ranks) in the job (required)\n"
    "  --gpu-memory SIZE         memory per GPU (default 80GiB)\n"
    "  --gpus-per-node N         GPUs per node: groups within a node use the intra-node link (default 8)\n"
    "  --intra-node-bw BW        per-GPU bandwidth within a node, one direction (default 450GB/s)\n"
    "  --inter-node-bw BW        per-GPU bandwidth between nodes (default 50GB/s = 400Gb/s)\n"
    "  --latency TIME            start-up cost of one message, both links (default 5us)\n"
    "  --gpu-tflops X            ACHIEVED TFLOP/s per GPU on the model's 6N + 6LTC count (default 400,\n"
    "                            about 40% of an H100 SXM's 989 dense bf16 peak)\n"
    "  --dtype fp32|bf16         fp32: float32 throughout; bf16: mixed precision on a GPU (default:\n"
    "                            the run's own, from training.device and training.dtype)\n"
    "  --threads N               OpenMP threads per rank (fp32: the CPU attention scratch; default\n"
    "                            training.threads, else as one node's ranks on a machine like this\n"
    "                            one would choose them)\n"
    "  --mttf-hours H            mean time to failure of ONE GPU (default 50000)\n"
    "  --checkpoint-seconds C    time to save a checkpoint (default: its size / --checkpoint-bw;\n"
    "                            `trainer bench --checkpoint --dir DIR` measures it)\n"
    "  --checkpoint-bw BW        write bandwidth for that estimate (default 2GB/s)\n"
    "  --top K                   rows to print (default 10)\n"
    "  --why                     also list every dropped layout and why\n"
    "  --json                    print every layout as a JSON array instead\n"
    "Sizes: 80GiB, 141GB, 512MiB. Bandwidths: 450GB/s, 400Gb/s (bits), 25GiB/s. Times: 5us, 1.5ms, 2s.\n";

struct PlanArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  PlanOptions options;
  bool gpus_set = false, dtype_set = false, threads_set = false;
  double mttf_hours = 50000;
  double checkpoint_seconds = -1;  // < 0: estimate
  double checkpoint_bw = 2e9;
  int top = 10;
  bool why = false, json = false;
};

ConfigError bad_value(const std::string& flag, const std::string& what, const std::string& value) {
  return ConfigError("plan: " + flag + ": expected " + what + ", got '" + value + "'");
}

// "450GB/s", "400Gb/s", "25GiB/s", "50e9": bytes per second ("b" and "bit" are bits).
double parse_bandwidth(const std::string& flag, const std::string& value) {
  std::string v = value;
  if (v.size() > 2 && v.compare(v.size() - 2, 2, "/s") == 0) v.resize(v.size() - 2);
  size_t used = 0;
  const double number = leading_number(v, used);
  const std::string unit = v.substr(used);
  double scale = 0;
  const std::string prefixes = "KMGT";
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const size_t k = prefixes.find(char(std::toupper(static_cast<unsigned char>(unit[0]))));
    const std::string rest = unit.substr(1);
    if (k != std::string::npos) {
      const double dec = std::pow(1e3, double(k + 1)), bin = std::pow(1024.0, double(k + 1));
      if (rest == "B") scale = dec;
      else if (rest == "iB") scale = bin;
      else if (rest == "b" || rest == "bit") scale = dec / 8;
    }
  }
  if (used == 0 || scale == 0 || !(number > 0)) throw bad_value(flag, "a bandwidth such as 450GB/s or 400Gb/s", value);
  return number * scale;
}

// "5us", "1.5ms", "2s", "100ns": seconds.
double parse_duration(const std::string& flag, const std::string& value) {
  size_t used = 0;
  const double number = leading_number(value, used);
  const std::string unit = value.substr(used);
  double scale = 0;
  if (unit == "s") scale = 1;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "us" || unit == "\xc2\xb5s") scale = 1e-6;
  else if (unit == "ns") scale = 1e-9;
  if (used == 0 || scale == 0 || !(number >= 0)) throw bad_value(flag, "a time such as 5us, 1.5ms or 2s", value);
  return number * scale;
}

double parse_positive(const std::string& flag, const std::string& value) {
  size_t used = 0;
  const double v = leading_number(value, used);
  if (used == 0 || used != value.size() || !(v > 0)) throw bad_value(flag, "a positive number", value);
  return v;
}

PlanArgs parse_args(const std::vector<std::string>& args) {
  PlanArgs a;
  Cluster& cl = a.options.cluster;
  const std::vector<std::string> with_value = {"--gpus", "--gpu-memory", "--gpus-per-node", "--intra-node-bw",
                                               "--inter-node-bw", "--latency", "--gpu-tflops", "--dtype",
                                               "--threads", "--mttf-hours", "--checkpoint-seconds",
                                               "--checkpoint-bw", "--top", "--set"};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (flag.rfind("--", 0) != 0) {
      if (!a.config_path.empty())
        throw ConfigError("plan: more than one config file given ('" + a.config_path + "' and '" + flag + "')");
      a.config_path = flag;
      continue;
    }
    if (flag == "--why") {
      a.why = true;
      continue;
    }
    if (flag == "--json") {
      a.json = true;
      continue;
    }
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (std::find(with_value.begin(), with_value.end(), flag) == with_value.end())
      throw ConfigError("plan: unknown option '" + args[i] + "'\n" + kUsage);
    if (eq == std::string::npos) {
      if (i + 1 >= args.size()) throw ConfigError("plan: " + flag + " needs a value\n" + kUsage);
      value = args[++i];
    }
    if (flag == "--set") {
      a.overrides.push_back(value);
    } else if (flag == "--gpus") {
      cl.gpus = parse_positive_int("plan: --gpus", value, kUsage);
      a.gpus_set = true;
    } else if (flag == "--gpu-memory") {
      cl.gpu_memory = double(parse_size("plan: --gpu-memory", value));
    } else if (flag == "--gpus-per-node") {
      cl.gpus_per_node = parse_positive_int("plan: --gpus-per-node", value, kUsage);
    } else if (flag == "--intra-node-bw") {
      cl.intra_node.bandwidth = parse_bandwidth(flag, value);
    } else if (flag == "--inter-node-bw") {
      cl.inter_node.bandwidth = parse_bandwidth(flag, value);
    } else if (flag == "--latency") {
      cl.intra_node.latency = cl.inter_node.latency = parse_duration(flag, value);
    } else if (flag == "--gpu-tflops") {
      cl.tflops = parse_positive(flag, value);
    } else if (flag == "--dtype") {
      if (value != "fp32" && value != "bf16") throw bad_value(flag, "fp32 or bf16", value);
      a.options.memory.dtype = value == "fp32" ? PlanDType::kFp32 : PlanDType::kBf16;
      a.dtype_set = true;
    } else if (flag == "--threads") {
      a.options.memory.threads = parse_positive_int("plan: --threads", value, kUsage);
      a.threads_set = true;
    } else if (flag == "--mttf-hours") {
      a.mttf_hours = parse_positive(flag, value);
    } else if (flag == "--checkpoint-seconds") {
      a.checkpoint_seconds = parse_positive(flag, value);
    } else if (flag == "--checkpoint-bw") {
      a.checkpoint_bw = parse_bandwidth(flag, value);
    } else if (flag == "--top") {
      a.top = parse_positive_int("plan: --top", value, kUsage);
    }
  }
  if (a.config_path.empty()) throw ConfigError(std::string("plan: name a config file\n") + kUsage);
  if (!a.gpus_set) throw ConfigError(std::string("plan: --gpus N is required: the GPUs (ranks) to plan for\n") + kUsage);
  return a;
}

// A unit for a column of sizes or times, chosen by its largest value so the table stays aligned.
struct Unit {
  const char* name;
  double scale;
};
Unit bytes_unit(double largest) {
  if (largest >= 1024.0 * 1024 * 1024) return {"GiB", 1024.0 * 1024 * 1024};
  if (largest >= 1024.0 * 1024) return {"MiB", 1024.0 * 1024};
  return {"KiB", 1024.0};
}
Unit time_unit(double largest) {
  if (largest >= 1) return {"s", 1};
  if (largest >= 1e-3) return {"ms", 1e-3};
  return {"us", 1e-6};
}

std::string human_bytes(double b) {
  const Unit u = bytes_unit(b);
  return formatted("%.2f ", b / u.scale) + u.name;
}

std::string human_seconds(double s) {
  if (s >= 86400) return formatted("%.1f days", s / 86400);
  if (s >= 3600) return formatted("%.2f h", s / 3600);
  if (s >= 60) return formatted("%.1f min", s / 60);
  if (s >= 1) return formatted("%.2f s", s);
  return formatted("%.2f ms", s * 1e3);
}

std::string human_count(double n) {
  if (n >= 1e9) return formatted("%.2fB", n / 1e9);
  if (n >= 1e6) return formatted("%.2fM", n / 1e6);
  if (n >= 1e3) return formatted("%.1fK", n / 1e3);
  return formatted("%.0f", n);
}

nlohmann::json to_json(const LayoutEstimate& l, PlanDType dtype, const Config& config) {
  nlohmann::json j;
  j["tp"] = l.layout.tp;
  j["pp"] = l.layout.pp;
  j["dp"] = l.layout.dp;
  j["zero_stage"] = l.layout.zero_stage;
  j["micro_batch_size"] = l.layout.micro_batch_size;
  j["num_micro_batches"] = l.layout.num_micro_batches;
  j["schedule"] = config.parallel.schedule;
  j["dp_sync"] = config.parallel.dp_sync;
  j["dtype"] = to_string(dtype);
  j["valid"] = l.valid;
  j["fits"] = l.fits;
  if (!l.fits) j["why"] = l.why;
  if (!l.valid) {
    j["memory_bytes"] = nullptr;
    j["time"] = nullptr;
    return j;
  }
  auto memory = [](const PlannedMemory& m) {
    return nlohmann::json{{"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer", m.optimizer},
                          {"activations", m.activations}, {"buffers", m.buffers}, {"total", m.total()}};
  };
  j["memory_bytes"] = memory(l.memory);
  j["memory_bytes_per_stage"] = nlohmann::json::array();
  for (const PlannedMemory& m : l.stage_memory) j["memory_bytes_per_stage"].push_back(memory(m));
  j["time"] = {{"compute_s", l.time.compute_s}, {"tp_comm_s", l.time.tp_comm_s}, {"pp_idle_s", l.time.pp_idle_s},
               {"dp_comm_s", l.time.dp_comm_s}, {"step_s", l.time.step_s()}};
  j["tokens_per_s"] = l.tokens_per_s;
  j["efficiency"] = l.efficiency;
  j["pp_idle_fraction"] = l.pp_idle_fraction;
  j["inter_node"] = {{"tp", l.tp_inter_node}, {"pp", l.pp_inter_node}, {"dp", l.dp_inter_node}};
  return j;
}

void print_table(const std::vector<const LayoutEstimate*>& rows) {
  double max_mem = 0, max_time = 0;
  for (const LayoutEstimate* l : rows) {
    max_mem = std::max(max_mem, l->memory.total());
    max_time = std::max(max_time, l->time.step_s());
  }
  const Unit mu = bytes_unit(max_mem), tu = time_unit(max_time);
  char line[320];
  std::snprintf(line, sizeof line, "%4s %3s %3s %4s %4s %5s %4s | %-44s | %-49s |", "#", "tp", "pp", "dp", "zero",
                "mbs", "m", ("memory per GPU (" + std::string(mu.name) + ")").c_str(),
                ("time per step (" + std::string(tu.name) + ")").c_str());
  log::info(line);
  std::snprintf(line, sizeof line, "%4s %3s %3s %4s %4s %5s %4s | %8s %8s %8s %8s %8s | %9s %9s %9s %9s %9s | %12s %5s %5s",
                "", "", "", "", "", "", "", "total", "params", "grads", "optim", "activ", "step", "compute",
                "tp_comm", "pp_idle", "dp_comm", "tokens/s", "E", "idle");
  log::info(line);
  int i = 0;
  for (const LayoutEstimate* l : rows) {
    const PlannedMemory& m = l->memory;
    const PlannedTime& t = l->time;
    std::snprintf(line, sizeof line,
                  "%4d %3d %3d %4d %4d %5d %4d | %8.2f %8.2f %8.2f %8.2f %8.2f | %9.3f %9.3f %9.3f %9.3f %9.3f | %12.0f "
                  "%5.2f %5.2f",
                  ++i, l->layout.tp, l->layout.pp, l->layout.dp, l->layout.zero_stage, l->layout.micro_batch_size,
                  l->layout.num_micro_batches, m.total() / mu.scale, m.parameters / mu.scale, m.gradients / mu.scale,
                  m.optimizer / mu.scale, (m.activations + m.buffers) / mu.scale, t.step_s() / tu.scale,
                  t.compute_s / tu.scale, t.tp_comm_s / tu.scale, t.pp_idle_s / tu.scale, t.dp_comm_s / tu.scale,
                  l->tokens_per_s, l->efficiency, l->pp_idle_fraction);
    log::info(line);
  }
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    }
  PlanArgs a = parse_args(args);
  const Config config = load_config(a.config_path, a.overrides);
  // The run's own compute dtype unless --dtype says otherwise; bf16 means a GPU.
  if (!a.dtype_set)
    a.options.memory.dtype = compute_dtype_for(config.training.device, config.training.dtype) == DType::kFloat32
                                 ? PlanDType::kFp32
                                 : PlanDType::kBf16;
  a.options.memory.gpu = config.training.device == "cuda" || a.options.memory.dtype == PlanDType::kBf16;
  // The threads a CPU run would use (each holds attention scratch): training.threads, else what
  // the thread policy gives the ranks of one node (--gpus-per-node) on a machine like this one,
  // as the run itself decides.
  if (!a.threads_set)
    a.options.memory.threads =
        config.training.threads > 0
            ? config.training.threads
            : thread_policy(std::min(a.options.cluster.gpus, a.options.cluster.gpus_per_node)).threads;
  const Cluster& cl = a.options.cluster;
  const std::vector<LayoutEstimate> layouts = plan_layouts(config, a.options);
  const PlanDType dtype = a.options.memory.dtype;

  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const LayoutEstimate& l : layouts) out.push_back(to_json(l, dtype, config));
    log::info(out.dump(2));
    return 0;
  }

  const ModelConfig& mc = config.model;
  const int64_t G = global_batch_sequences(config, cl.gpus);
  const int T = config.training.seq_len;
  const int nodes = (cl.gpus + cl.gpus_per_node - 1) / cl.gpus_per_node;
  log::info("plan: " + a.config_path + " on " + std::to_string(cl.gpus) + " GPUs (" + std::to_string(nodes) +
            (nodes == 1 ? " node" : " nodes") + " of " + std::to_string(cl.gpus_per_node) + ")");
  log::info("model: " + mc.arch + ", " + std::to_string(mc.n_layer) + " layers, n_embd " + std::to_string(mc.n_embd) +
            ", " + std::to_string(mc.n_head) + " heads, vocabulary " + std::to_string(mc.vocab_size) + "; N = " +
            human_count(matmul_parameters(mc)) + " parameters, " +
            human_count(training_flops_per_token(mc, T)) + " FLOP/token (6N + 6LTC at T = " + std::to_string(T) + ")");
  log::info("batch: " + std::to_string(G) + " sequences x " + std::to_string(T) + " tokens = " +
            std::to_string(G * T) + " tokens/step; schedule " + config.parallel.schedule + "; data-parallel sync " +
            config.parallel.dp_sync);
  log::info("assumed: " + to_string(dtype) +
            (dtype == PlanDType::kBf16 ? " (bf16 weights and activations, fp32 gradients, master weights and moments)"
             : a.options.memory.gpu    ? " (float32 throughout on GPUs)"
                                       : " (the trainer's CPU path: float32 throughout)") +
            (a.dtype_set ? "" : " from training.device = \"" + config.training.device + "\", training.dtype = \"" +
                                    config.training.dtype + "\"") +
            "; " +
            human_bytes(cl.gpu_memory) + " per GPU; " + formatted("%.0f", cl.intra_node.bandwidth / 1e9) +
            " GB/s within a node, " + formatted("%.0f", cl.inter_node.bandwidth / 1e9) + " GB/s between nodes, " +
            formatted("%.1f", cl.intra_node.latency * 1e6) + " us per message; " + formatted("%.0f", cl.tflops) +
            " TFLOP/s achieved per GPU (flags override; defaults are H100 SXM-like)");
  int valid = 0, fit = 0;
  for (const LayoutEstimate& l : layouts) {
    valid += l.valid ? 1 : 0;
    fit += l.fits ? 1 : 0;
  }
  log::info("layouts: " + std::to_string(layouts.size()) + " considered, " + std::to_string(valid) +
            " valid, " + std::to_string(fit) + " fit in " + human_bytes(cl.gpu_memory) +
            (a.why || fit == int(layouts.size()) ? "" : " (--why lists the others)"));
  std::vector<const LayoutEstimate*> rows;
  for (const LayoutEstimate& l : layouts)
    if (l.fits && int(rows.size()) < a.top) rows.push_back(&l);
  if (rows.empty()) {
    const LayoutEstimate* smallest = nullptr;
    for (const LayoutEstimate& l : layouts)
      if (l.valid && (!smallest || l.memory.total() < smallest->memory.total())) smallest = &l;
    log::info(smallest ? "no layout fits: the smallest, " + smallest->layout.name() + ", " + smallest->why
                       : "no layout is valid for this config on " + std::to_string(cl.gpus) + " GPUs (--why says why)");
  } else {
    log::info("");
    print_table(rows);
    log::info("  memory: the rank that needs the most (its stage holds the embedding or the head); activ includes "
              "buffers; E = compute / step; idle = (p-1)/(m+p-1)");
  }
  if (a.why) {
    log::info("");
    log::info("dropped:");
    for (const LayoutEstimate& l : layouts)
      if (!l.fits)
        log::info("  " + (l.valid ? l.layout.name() : "tp" + std::to_string(l.layout.tp) + " pp" +
                                                            std::to_string(l.layout.pp) + " dp" +
                                                            std::to_string(l.layout.dp)) +
                  ": " + l.why);
  }

  // Failures: any GPU failing ends the job, so the cluster fails N times as often as one GPU;
  // checkpointing every sqrt(2 C MTTF) (Young 1974, Daly 2006) minimises the work lost.
  const double mttf_h = cluster_mttf_hours(a.mttf_hours, cl.gpus), mttf_s = mttf_h * 3600;
  const double ckpt_bytes = checkpoint_bytes(mc);
  const bool measured = a.checkpoint_seconds > 0;
  const double C = measured ? a.checkpoint_seconds : ckpt_bytes / a.checkpoint_bw;
  const double interval = young_daly_interval_seconds(C, mttf_s);
  log::info("");
  log::info("reliability: one GPU's MTTF " + formatted("%.0f", a.mttf_hours) + " h / " + std::to_string(cl.gpus) +
            " GPUs = cluster MTTF " + human_seconds(mttf_s));
  log::info("checkpoint: " + human_bytes(ckpt_bytes) + " (fp32 weights, master weights, 2 moments); C = " +
            human_seconds(C) +
            (measured ? " (--checkpoint-seconds)"
                      : " estimated at " + formatted("%.1f", a.checkpoint_bw / 1e9) +
                            " GB/s (measure it: trainer bench --checkpoint --dir DIR, then --checkpoint-seconds)"));
  std::string steps;
  if (!rows.empty()) steps = " = every " + formatted("%.0f", std::max(1.0, std::round(interval / rows[0]->time.step_s()))) +
                             " steps of layout #1";
  log::info("Young/Daly interval sqrt(2 C MTTF) = " + human_seconds(interval) + steps + "; expected loss " +
            formatted("%.2f", 100 * (C / interval + interval / (2 * mttf_s))) + "% of the time (C/interval + interval/(2 MTTF))");
  return 0;
}

}  // namespace feast
