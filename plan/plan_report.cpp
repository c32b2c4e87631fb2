#include "plan/plan_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/formatted.h"
#include "core/log.h"
#include "model/architecture.h"
#include "model/flop_count.h"

namespace feast {

namespace {

// The sched column's short name: zero-bubble "zb", interleaved-1f1b "iv", the others as named.
const char* schedule_column(const std::string& schedule) {
  if (schedule == "zero-bubble") return "zb";
  if (schedule == "interleaved-1f1b") return "iv";
  return schedule.c_str();
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
  j["ep"] = l.layout.ep;
  j["zero_stage"] = l.layout.zero_stage;
  j["micro_batch_size"] = l.layout.micro_batch_size;
  j["num_micro_batches"] = l.layout.num_micro_batches;
  j["recompute"] = l.layout.recompute;
  j["offload_optimizer"] = l.layout.offload;
  j["sequence_parallel"] = l.layout.sequence_parallel;
  j["schedule"] = l.layout.schedule;
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
                          {"activations", m.activations}, {"workspace", m.workspace}, {"communication", m.communication},
                          {"buffers", m.buffers}, {"total", m.total()},
                          {"activations_per_micro_batch", m.activations_per_micro_batch},
                          {"offloaded_to_host", m.offloaded}};
  };
  j["memory_bytes"] = memory(l.memory);
  j["memory_bytes_per_stage"] = nlohmann::json::array();
  for (const PlannedMemory& m : l.stage_memory) j["memory_bytes_per_stage"].push_back(memory(m));
  j["time"] = {{"compute_s", l.time.compute_s}, {"tp_comm_s", l.time.tp_comm_s}, {"pp_idle_s", l.time.pp_idle_s},
               {"dp_comm_s", l.time.dp_comm_s}, {"ep_comm_s", l.time.ep_comm_s}, {"offload_s", l.time.offload_s},
               {"step_s", l.time.step_s()}};
  j["tokens_per_s"] = l.tokens_per_s;
  j["efficiency"] = l.efficiency;
  j["pp_idle_fraction"] = l.pp_idle_fraction;
  j["inter_node"] = {{"tp", l.tp_inter_node}, {"pp", l.pp_inter_node}, {"dp", l.dp_inter_node}, {"ep", l.ep_inter_node}};
  return j;
}

void print_table(const std::vector<const LayoutEstimate*>& rows) {
  double max_mem = 0, max_time = 0;
  for (const LayoutEstimate* l : rows) {
    max_mem = std::max(max_mem, l->memory.total());
    max_time = std::max(max_time, l->time.step_s());
  }
  const Unit mu = bytes_unit(max_mem), tu = time_unit(max_time);
  char line[400];
  std::snprintf(line, sizeof line, "%4s %3s %3s %4s %3s %4s %5s %4s %5s %3s %3s %3s | %-44s | %-69s |", "#", "tp", "pp",
                "dp", "ep", "zero", "mbs", "m", "sched", "sp", "rc", "off", ("memory per GPU (" + std::string(mu.name) + ")").c_str(),
                ("time per step (" + std::string(tu.name) + ")").c_str());
  log::info(line);
  std::snprintf(line, sizeof line,
                "%4s %3s %3s %4s %3s %4s %5s %4s %5s %3s %3s %3s | %8s %8s %8s %8s %8s | %9s %9s %9s %9s %9s %9s %9s | %12s %5s %5s",
                "", "", "", "", "", "", "", "", "", "", "", "", "total", "params", "grads", "optim", "activ", "step", "compute",
                "tp_comm", "pp_idle", "dp_comm", "ep_comm", "offload", "tokens/s", "E", "idle");
  log::info(line);
  int i = 0;
  for (const LayoutEstimate* l : rows) {
    const PlannedMemory& m = l->memory;
    const PlannedTime& t = l->time;
    std::snprintf(line, sizeof line,
                  "%4d %3d %3d %4d %3d %4d %5d %4d %5s %3s %3s %3s | %8.2f %8.2f %8.2f %8.2f %8.2f | %9.3f %9.3f %9.3f %9.3f "
                  "%9.3f %9.3f %9.3f | %12.0f %5.2f %5.2f",
                  ++i, l->layout.tp, l->layout.pp, l->layout.dp, l->layout.ep, l->layout.zero_stage, l->layout.micro_batch_size,
                  l->layout.num_micro_batches, schedule_column(l->layout.schedule),
                  l->layout.sequence_parallel ? "yes" : "-", l->layout.recompute == "none" ? "-" : l->layout.recompute == "full" ? "F" : "S",
                  l->layout.offload ? "yes" : "-", m.total() / mu.scale, m.parameters / mu.scale, (m.gradients + m.communication) / mu.scale,
                  m.optimizer / mu.scale, (m.activations + m.workspace + m.buffers) / mu.scale,
                  t.step_s() / tu.scale,
                  t.compute_s / tu.scale, t.tp_comm_s / tu.scale, t.pp_idle_s / tu.scale, t.dp_comm_s / tu.scale,
                  t.ep_comm_s / tu.scale, t.offload_s / tu.scale, l->tokens_per_s, l->efficiency, l->pp_idle_fraction);
    log::info(line);
  }
}

}  // namespace

std::optional<LayoutEstimate> print_plan(const Config& config, const PlanRequest& r) {
  const Cluster& cl = r.options.cluster;
  const std::vector<LayoutEstimate> layouts = plan_layouts(config, r.options);
  const PlanDType dtype = r.options.memory.dtype;

  if (r.json) {
    if (!r.figures.empty()) log::note("plan: figures: " + r.figures);  // stdout is the JSON
    nlohmann::json out = nlohmann::json::array();
    for (const LayoutEstimate& l : layouts) out.push_back(to_json(l, dtype, config));
    log::info(out.dump(2));
    if (!layouts.empty() && layouts.front().fits) return layouts.front();
    return std::nullopt;
  }

  const ModelConfig& mc = config.model;
  const int64_t G = global_batch_sequences(config, cl.gpus);
  const int T = config.training.seq_len;
  const int nodes = (cl.gpus + cl.gpus_per_node - 1) / cl.gpus_per_node;
  log::info("plan: " + r.config_path + " on " + std::to_string(cl.gpus) + " GPUs (" + std::to_string(nodes) +
            (nodes == 1 ? " node" : " nodes") + " of " + std::to_string(cl.gpus_per_node) + ")");
  log::info("model: " + mc.arch + ", " + std::to_string(mc.n_layer) + " layers, n_embd " + std::to_string(mc.n_embd) +
            ", " + std::to_string(mc.n_head) + " heads, vocabulary " + std::to_string(mc.vocab_size) + "; N = " +
            human_count(matmul_parameters(mc)) + " parameters" +
            (mc.moe.enabled() ? " (" + human_count(active_matmul_parameters(mc)) + " active: top " +
                                    std::to_string(mc.moe.top_k) + " of " + std::to_string(mc.moe.n_experts) +
                                    " experts)"
                              : std::string()) +
            ", " +
            human_count(training_flops_per_token(mc, T, lora_spec(config))) +
            (config.lora.enabled() ? " FLOP/token (LoRA: 4N + 6N_lora + 6LTC at T = " : " FLOP/token (6N + 6LTC at T = ") +
            std::to_string(T) + ")");
  log::info("batch: " + std::to_string(G) + " sequences x " + std::to_string(T) + " tokens = " +
            std::to_string(G * T) + " tokens/step; schedule " + config.parallel.schedule + "; data-parallel sync " +
            config.parallel.dp_sync);
  log::info("assumed: " + to_string(dtype) +
            (dtype == PlanDType::kBf16 ? " (bf16 weights and activations, fp32 gradients, master weights and moments)"
             : r.options.memory.gpu    ? " (float32 throughout on GPUs)"
                                       : " (the trainer's CPU path: float32 throughout)") +
            (r.dtype_given ? "" : " from training.device = \"" + config.training.device + "\", training.dtype = \"" +
                                    config.training.dtype + "\"") +
            "; " +
            human_bytes(cl.gpu_memory) + " per GPU; " + formatted("%.3g", cl.intra_node.bandwidth / 1e9) +
            " GB/s within a node, " + formatted("%.3g", cl.inter_node.bandwidth / 1e9) + " GB/s between nodes, " +
            formatted("%.3g", cl.intra_node.latency * 1e6) + " us per message; " + formatted("%.4g", cl.tflops) +
            " TFLOP/s achieved per GPU");
  if (!r.figures.empty()) log::info("figures: " + r.figures);
  if (config.parallel.cp > 1)
    log::info("context parallelism: parallel.cp = " + std::to_string(config.parallel.cp) +
              " is not searched (its ring's time is not modelled yet): every layout below has cp = 1; "
              "docs/planner.md");
  int valid = 0, fit = 0;
  for (const LayoutEstimate& l : layouts) {
    valid += l.valid ? 1 : 0;
    fit += l.fits ? 1 : 0;
  }
  log::info("layouts: " + std::to_string(layouts.size()) + " considered, " + std::to_string(valid) +
            " valid, " + std::to_string(fit) + " fit in " + human_bytes(cl.gpu_memory) +
            (r.why || fit == int(layouts.size()) ? "" : " (--why lists the others)"));
  std::vector<const LayoutEstimate*> rows;
  for (const LayoutEstimate& l : layouts)
    if (l.fits && int(rows.size()) < r.top) rows.push_back(&l);
  const LayoutEstimate* smallest = nullptr;
  for (const LayoutEstimate& l : layouts)
    if (l.valid && (!smallest || l.memory.total() < smallest->memory.total())) smallest = &l;
  if (rows.empty()) {
    if (!smallest) log::info("no layout is valid for this config on " + std::to_string(cl.gpus) + " GPUs (--why says why)");
  } else {
    log::info("");
    print_table(rows);
    log::info("  memory: the rank that needs the most (its stage holds the embedding or the head); grads include "
              "communication buffers, activ the workspace and buffers; ep: parallel.ep (ep_comm its all-to-all exchanges); sched: parallel.schedule (zb zero-bubble, iv interleaved-1f1b); sp: parallel.sequence_parallel; rc: training.recompute (S selective, F full); off: parallel.offload_optimizer (its state "
              "in host memory, not counted); E = compute / step; idle = the schedule's formula, (p-1)/(m+p-1), zero-bubble's (p-1)/(3m+p-1) or interleaved's "
              "(p-1)/(vm+p-1)");
    // What a larger GPU would buy: the layouts predicted faster than the first row, and why
    // each is out.
    std::vector<const LayoutEstimate*> faster;
    for (const LayoutEstimate& l : layouts)
      if (l.valid && !l.fits && l.tokens_per_s > rows[0]->tokens_per_s) faster.push_back(&l);
    std::stable_sort(faster.begin(), faster.end(),
                     [](const LayoutEstimate* a, const LayoutEstimate* b) { return a->tokens_per_s > b->tokens_per_s; });
    if (!faster.empty()) {
      log::info("faster layouts that do not fit (" + std::to_string(faster.size()) + "; the fastest " +
                std::to_string(std::min<size_t>(faster.size(), 5)) + "):");
      for (size_t i = 0; i < faster.size() && i < 5; ++i)
        log::info("  " + faster[i]->layout.name() + ": " +
                  formatted("%.0f%% faster, ", 100 * (faster[i]->tokens_per_s / rows[0]->tokens_per_s - 1)) +
                  faster[i]->why);
    }
  }
  if (r.why) {
    log::info("");
    log::info("dropped:");
    for (const LayoutEstimate& l : layouts)
      if (!l.fits)
        log::info("  " + (l.valid ? l.layout.name() : "tp" + std::to_string(l.layout.tp) + " pp" +
                                                            std::to_string(l.layout.pp) + " dp" +
                                                            std::to_string(l.layout.dp)) +
                  ": " + l.why);
  }
  if (rows.empty() && smallest)
    throw ConfigError("--gpu-memory " + human_bytes(cl.gpu_memory) + ": no layout of this config fits on " +
                      std::to_string(cl.gpus) + " GPUs; the smallest, " + smallest->layout.name() + ", " +
                      smallest->why + "; give more memory "
                      "per GPU (--gpu-memory), more GPUs (--gpus), or a smaller model, micro-batch or sequence");

  // Failures: any GPU failing ends the job, so the cluster fails N times as often as one GPU;
  // checkpointing every sqrt(2 C MTTF) (Young 1974, Daly 2006) minimises the work lost.
  const double mttf_h = cluster_mttf_hours(r.mttf_hours, cl.gpus), mttf_s = mttf_h * 3600;
  // Under LoRA a checkpoint holds the adapters alone.
  const double ckpt_bytes = checkpoint_bytes(config.lora.enabled() ? lora_param_table(mc, lora_spec(config))
                                                                   : decoder_param_table(mc));
  const bool measured = r.checkpoint_seconds > 0;
  const double C = measured ? r.checkpoint_seconds : ckpt_bytes / r.checkpoint_bw;
  const double interval = young_daly_interval_seconds(C, mttf_s);
  log::info("");
  log::info("reliability: one GPU's MTTF " + formatted("%.0f", r.mttf_hours) + " h / " + std::to_string(cl.gpus) +
            " GPUs = cluster MTTF " + human_seconds(mttf_s));
  log::info("checkpoint: " + human_bytes(ckpt_bytes) + " (fp32 weights, master weights, 2 moments); C = " +
            human_seconds(C) +
            (measured ? " (--checkpoint-seconds)"
                      : " estimated at " + formatted("%.1f", r.checkpoint_bw / 1e9) +
                            " GB/s (measure it: trainer bench checkpoint --dir DIR, then --checkpoint-seconds)"));
  std::string steps;
  if (!rows.empty()) steps = " = every " + formatted("%.0f", std::max(1.0, std::round(interval / rows[0]->time.step_s()))) +
                             " steps of layout #1";
  log::info("Young/Daly interval sqrt(2 C MTTF) = " + human_seconds(interval) + steps + "; expected loss " +
            formatted("%.2f", 100 * (C / interval + interval / (2 * mttf_s))) + "% of the time (C/interval + interval/(2 MTTF))");
  if (rows.empty()) return std::nullopt;
  return *rows[0];
}

}  // namespace feast
