#include "train/metrics/run_summary.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/plural.h"
#include "comm/layout.h"

namespace feast {

double TimeSplit::efficiency() const {
  const double busy = compute + tp_comm + cp_comm + ep_comm + pp_idle + dp_comm;
  return busy > 0 ? compute / busy : 0.0;
}

double TimeSplit::pipeline_idle_fraction() const {
  const double span = compute + tp_comm + cp_comm + ep_comm + pp_idle + data;
  return span > 0 ? pp_idle / span : 0.0;
}

// A figure added to TimeSplit must be added to kMembers too.
static_assert(sizeof(TimeSplit) == TimeSplit::kFields * sizeof(double), "TimeSplit::kMembers lists every figure");

TimeSplit& TimeSplit::operator+=(const TimeSplit& o) {
  for (double TimeSplit::*field : kMembers) this->*field += o.*field;
  return *this;
}

TimeSplit TimeSplit::scaled(double f) const {
  TimeSplit out = *this;
  for (double TimeSplit::*field : kMembers) out.*field *= f;
  return out;
}

TimeSplit split_of(const StepTiming& t) {
  TimeSplit s;
  s.compute = t.stage.compute;
  s.tp_comm = t.stage.tp_comm;
  s.cp_comm = t.stage.ring.wait_seconds;
  s.ep_comm = t.stage.ep_comm;
  s.pp_idle = t.stage.pp_wait + t.stage.send_wait;
  s.dp_comm = t.dp_comm;
  s.optimizer = t.optimizer;
  s.data = t.stage.data;
  s.total = t.total;
  // Every timed part is a disjoint piece of the step, so the rest is what no timer saw; a
  // rounding below zero is no time at all.
  s.other = std::max(0.0, s.total - s.timed());
  s.total = s.timed() + s.other;
  s.dp_reduce = t.dp_reduce.in_flight;
  s.dp_reduce_exposed = t.dp_reduce.exposed;
  s.dp_gather = t.dp_gather.in_flight;
  s.dp_gather_exposed = t.dp_gather.exposed;
  s.offload_update = t.offload.update;
  s.offload_wait = t.offload.waited;
  s.cp_ring = t.stage.ring.seconds;
  s.cp_bytes = t.stage.ring.bytes_sent;
  return s;
}

TimeSplit mean_over_ranks(Communicator& world, const TimeSplit& mine) {
  double v[TimeSplit::kFields];
  for (size_t i = 0; i < TimeSplit::kFields; ++i) v[i] = mine.*TimeSplit::kMembers[i];
  world.allreduce(v, TimeSplit::kFields, DType::kFloat64)->wait();
  TimeSplit sum;
  for (size_t i = 0; i < TimeSplit::kFields; ++i) sum.*TimeSplit::kMembers[i] = v[i];
  return sum.scaled(1.0 / world.size());
}

double mfu(double flops_per_token, int64_t tokens, double seconds, const DevicePeak& peak, int world_size) {
  const double peak_flops = peak.tflops_per_rank * 1e12 * world_size;
  return seconds > 0 && peak_flops > 0 ? flops_per_token * double(tokens) / seconds / peak_flops : 0.0;
}

void RunStatistics::add(const TimeSplit& s) {
  if (steps_ == 0) first_ = s;
  else sum_ += s;
  ++steps_;
}

TimeSplit RunStatistics::mean() const {
  if (steps_ == 0) return {};
  if (steps_ == 1) return first_;
  return sum_.scaled(1.0 / double(steps_ - 1));
}

nlohmann::json split_json(const TimeSplit& s) {
  return {{"compute_s", s.compute},     {"tp_comm_s", s.tp_comm}, {"cp_comm_s", s.cp_comm}, {"ep_comm_s", s.ep_comm},
          {"pp_idle_s", s.pp_idle},     {"dp_comm_s", s.dp_comm}, {"optimizer_s", s.optimizer},
          {"data_s", s.data},           {"other_s", s.other}};
}

nlohmann::json reduction_json(const TimeSplit& s) {
  return {{"dp_reduce_s", s.dp_reduce},
          {"dp_reduce_exposed_s", s.dp_reduce_exposed},
          {"dp_gather_s", s.dp_gather},
          {"dp_gather_exposed_s", s.dp_gather_exposed}};
}

nlohmann::json offload_json(const TimeSplit& s) {
  return {{"offload_update_s", s.offload_update}, {"offload_wait_s", s.offload_wait}};
}

std::string summary_json(const RunFacts& f, const RunOutcome& o) {
  const Config& c = *f.config;
  const TimeSplit& s = o.mean_split;
  nlohmann::json j = {
      {"config", f.config_path},
      {"ended", o.ended},
      {"world_size", f.world_size},
      {"tp", f.tp},
      {"pp", f.pp},
      {"dp", f.dp},
      {"cp", f.cp},
      // In use: one replica has nothing to shard, so dp 1 (and cp 1) runs ZeRO 0 whatever was
      // configured.
      {"zero_stage", f.dp * f.cp == 1 ? 0 : c.parallel.zero_stage},
      {"dp_sync", c.parallel.dp_sync},
      {"schedule", c.parallel.schedule},
      {"virtual_stages", c.parallel.virtual_stages},
      {"micro_batch_size", c.parallel.micro_batch_size},
      {"micro_batches", f.micro_batches},
      {"seq_len", c.training.seq_len},
      {"tokens_per_step", f.tokens_per_step},
      {"arch", c.model.arch},
      {"n_layer", c.model.n_layer},
      {"n_head", c.model.n_head},
      {"n_embd", c.model.n_embd},
      {"vocab_size", c.model.vocab_size},
      {"parameters", f.parameters},
      {"flops_per_token", f.flops_per_token},
      {"first_step", o.first_step},
      {"steps", o.steps},
      {"measured_steps", o.measured_steps},
      {"tokens_seen", o.tokens_seen},
      {"train_seconds", o.train_seconds},
      {"final_loss", o.final_loss ? nlohmann::json(*o.final_loss) : nlohmann::json(nullptr)},
      {"final_val_loss", o.final_val_loss ? nlohmann::json(*o.final_val_loss) : nlohmann::json(nullptr)},
      {"tokens_per_s", s.total > 0 ? double(f.tokens_per_step) / s.total : 0.0},
      {"ms_per_step", s.total * 1e3},
      {"time_split", split_json(s)},
      {"dp_reductions", reduction_json(s)},
      {"optimizer_offload", offload_json(s)},
      {"pp_idle_fraction", s.pipeline_idle_fraction()},
      {"pp_idle_formula", idle_fraction_formula(f.schedule, f.pp, f.micro_batches, f.virtual_stages)},
      {"efficiency", s.efficiency()},
      {"mfu", mfu(f.flops_per_token, f.tokens_per_step, s.total, f.peak, f.world_size)},
      {"peak_tflops_per_rank", f.peak.tflops_per_rank},
      {"peak_source", f.peak.source},
  };
  if (!f.cpu_kernels.empty()) j["cpu_kernels"] = f.cpu_kernels;
  if (o.server_traffic) {
    const ServerTraffic& t = *o.server_traffic;
    j["parameter_server_bytes_per_step"] = {{"push", t.push},
                                            {"pull", t.pull},
                                            {"dense_push", t.dense_push},
                                            {"dense_pull", t.dense_pull},
                                            {"refresh_total", t.refresh}};
  }
  nlohmann::json memory = nlohmann::json::array();
  for (const MemoryBytes& m : f.memory)
    memory.push_back({m.parameters, m.gradients, m.optimizer, m.activations, m.workspace, m.communication});
  j["memory_bytes_per_rank"] = memory;
  if (!o.memory_high_water.empty()) {
    nlohmann::json high = nlohmann::json::array();
    for (const MemoryBytes& m : o.memory_high_water)
      high.push_back({m.parameters, m.gradients, m.optimizer, m.activations, m.workspace, m.communication, m.device_peak});
    j["memory_high_water_bytes_per_rank"] = high;
  }
  nlohmann::json per_micro_batch = nlohmann::json::array();
  for (const MemoryBytes& m : f.memory) per_micro_batch.push_back(m.activations_per_micro_batch);
  j["activation_bytes_per_micro_batch"] = per_micro_batch;
  nlohmann::json offloaded = nlohmann::json::array();
  for (const MemoryBytes& m : f.memory) offloaded.push_back(m.offloaded);
  j["offloaded_bytes_per_rank"] = offloaded;
  return j.dump(1) + "\n";
}

std::vector<std::string> format_summary(const RunFacts& f, const RunOutcome& o) {
  std::vector<std::string> lines;
  const TimeSplit& s = o.mean_split;
  if (o.measured_steps == 0 || s.total <= 0) return lines;
  char buf[256];
  auto pct = [&](double part) { return 100.0 * part / s.total; };
  char cp_part[64] = "";  // only where context parallelism runs its ring (or expert parallelism its all-to-all)
  if (f.cp > 1) std::snprintf(cp_part, sizeof cp_part, "cp-comm %.1f%% | ", pct(s.cp_comm));
  // Expert parallelism's all-to-all, where it runs, beside the tensor-parallel all-reduces.
  if (f.ep > 1)
    std::snprintf(cp_part + std::strlen(cp_part), sizeof cp_part - std::strlen(cp_part), "ep-comm %.1f%% | ",
                  pct(s.ep_comm));
  std::snprintf(buf, sizeof buf, "time per step (mean of %s, ranks averaged): %.1f ms = compute %.1f%% | tp-comm %.1f%% | "
                "%spp-idle %.1f%% | dp-comm %.1f%% | optimizer %.1f%% | data %.1f%% | other %.1f%%",
                count_of(o.measured_steps, "step").c_str(), s.total * 1e3, pct(s.compute), pct(s.tp_comm), cp_part,
                pct(s.pp_idle), pct(s.dp_comm), pct(s.optimizer), pct(s.data), pct(s.other));
  lines.push_back(buf);
  if (f.cp > 1 && s.cp_ring > 0) {
    std::snprintf(buf, sizeof buf,
                  "context-parallel ring: %s MiB sent per rank per step; attention on the ring %.1f ms per step, "
                  "%.1f ms of it waiting for key/value blocks (%.0f%%; the rest block computations the transfers "
                  "ran beside)",
                  mib(s.cp_bytes).c_str(), s.cp_ring * 1e3, s.cp_comm * 1e3, 100.0 * s.cp_comm / s.cp_ring);
    lines.push_back(buf);
  }
  if (f.pp > 1) {
    std::snprintf(buf, sizeof buf,
                  "pipeline idle: measured %.1f%% of the schedule's span (compute, tp-comm, data and idle), "
                  "%s formula %s with p = %d, m = %d%s: %.1f%%",
                  100.0 * s.pipeline_idle_fraction(), to_string(f.schedule).c_str(),
                  idle_fraction_formula_text(f.schedule, f.pp, f.micro_batches), f.pp, f.micro_batches,
                  f.virtual_stages > 1 ? (", v = " + std::to_string(f.virtual_stages)).c_str() : "",
                  100.0 * idle_fraction_formula(f.schedule, f.pp, f.micro_batches, f.virtual_stages));
    lines.push_back(buf);
  }
  // Communication that overlaps the passes: how long it ran, and how much the rank waited.
  auto overlap = [&](const char* what, double in_flight, double exposed, const char* behind) {
    if (in_flight <= 0) return;
    std::snprintf(buf, sizeof buf, "%s: %.1f ms in flight per step, %.1f ms of it exposed (waited for), %.0f%% hidden %s",
                  what, in_flight * 1e3, exposed * 1e3, 100.0 * std::clamp(1.0 - exposed / in_flight, 0.0, 1.0), behind);
    lines.push_back(buf);
  };
  overlap("data-parallel gradient reductions", s.dp_reduce, s.dp_reduce_exposed, "behind the backward");
  overlap("ZeRO 3 gathers of units", s.dp_gather, s.dp_gather_exposed, "behind the units before them");
  if (s.offload_update > 0) {
    std::snprintf(buf, sizeof buf,
                  "optimizer offload: the host updated for %.1f ms per step and waited %.1f ms for gradients to "
                  "arrive; the weights travel back beside the update (what follows on the device waits for them)",
                  s.offload_update * 1e3, s.offload_wait * 1e3);
    lines.push_back(buf);
  }
  if (!o.memory_high_water.empty()) {
    lines.push_back("memory at the end, high-water marks:");
    for (const std::string& line : format_memory_table(o.memory_high_water, false)) lines.push_back("  " + line);
  }
  if (o.server_traffic) {
    const ServerTraffic& t = *o.server_traffic;
    lines.push_back("parameter server: each rank pushed " + mib(t.push) + " MiB and pulled " + mib(t.pull) +
                    " MiB per step (mean over ranks); the dense exchange moves " + mib(t.dense_push) + " and " +
                    mib(t.dense_pull) + " MiB");
  }
  const double m = mfu(f.flops_per_token, f.tokens_per_step, s.total, f.peak, f.world_size);
  std::snprintf(buf, sizeof buf,
                "scaling efficiency E = compute / (compute + exposed communication) = %.3f; %.0f tokens/s; MFU %.1f%% "
                "of %.3g TFLOP/s per rank (%s; %.3g model GFLOP per token)",
                s.efficiency(), double(f.tokens_per_step) / s.total, 100.0 * m, f.peak.tflops_per_rank,
                f.peak.source.c_str(), f.flops_per_token / 1e9);
  lines.push_back(buf);
  return lines;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1024.0 * 1024.0));
  return buf;
}

std::vector<std::string> format_memory_table(const std::vector<MemoryBytes>& memory, bool every_rank) {
  std::vector<std::pair<std::vector<std::string>, std::vector<int>>> rows;  // figures, ranks
  for (int r = 0; r < int(memory.size()); ++r) {
    const MemoryBytes& m = memory[size_t(r)];
    std::vector<std::string> figures = {mib(m.parameters),  mib(m.gradients),     mib(m.optimizer),
                                        mib(m.activations), mib(m.activations_per_micro_batch), mib(m.workspace),
                                        mib(m.communication), mib(m.total())};
    auto same = std::find_if(rows.begin(), rows.end(), [&](const auto& row) { return row.first == figures; });
    if (every_rank || memory.size() <= 16 || same == rows.end()) rows.push_back({figures, {r}});
    else same->second.push_back(r);
  }
  std::vector<std::string> lines = {
      "memory per rank (MiB): rank(s) | parameters | gradients | optimizer | activations (per micro-batch) | "
      "workspace | comm buffers | total"};
  for (const auto& [f, ranks] : rows) {
    char line[260];
    std::snprintf(line, sizeof line, "  %6s | %10s | %9s | %9s | %11s (%13s) | %9s | %12s | %9s",
                  format_ranges(ranks).c_str(), f[0].c_str(), f[1].c_str(), f[2].c_str(), f[3].c_str(), f[4].c_str(),
                  f[5].c_str(), f[6].c_str(), f[7].c_str());
    lines.push_back(line);
  }
  double offloaded = 0, device_peak = 0;
  for (const MemoryBytes& m : memory) {
    offloaded = std::max(offloaded, m.offloaded);
    device_peak = std::max(device_peak, m.device_peak);
  }
  if (device_peak > 0)
    lines.push_back("  the device allocator's high-water mark: up to " + mib(device_peak) +
                    " MiB per rank (every allocation, workspaces included)");
  if (offloaded > 0)
    lines.push_back("  optimizer state offloaded to host memory (parallel.offload_optimizer): up to " + mib(offloaded) +
                    " MiB per rank, not in the table");
  return lines;
}

std::vector<MemoryBytes> gather_memory(Communicator& world, const MemoryBytes& mine) {
  constexpr size_t kParts = 9;
  const double v[kParts] = {mine.parameters,    mine.gradients, mine.optimizer,
                            mine.activations,   mine.workspace, mine.communication,
                            mine.activations_per_micro_batch, mine.offloaded, mine.device_peak};
  std::vector<double> all(kParts * size_t(world.size()));
  const std::vector<size_t> counts(size_t(world.size()), kParts);
  world.allgather(v, all.data(), counts, DType::kFloat64)->wait();
  std::vector<MemoryBytes> out(size_t(world.size()));
  for (size_t r = 0; r < out.size(); ++r) {
    const double* p = &all[kParts * r];
    out[r] = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]};
  }
  return out;
}

}  // namespace feast
