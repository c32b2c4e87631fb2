#include "cli/plan_verify.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/child_process.h"
#include "config/layout_plan.h"
#include "core/error.h"
#include "core/formatted.h"
#include "core/log.h"

namespace feast {
namespace {

// Three steps: the first warms up (allocations, first products), the other two are measured.
constexpr int kVerifySteps = 3;

// printf into a string, for the rows of the comparison.
template <typename... Args>
std::string printed(const char* format, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

std::string percent_off(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? "0%" : "-";
  return formatted("%+.1f%%", 100 * (predicted - measured) / measured);
}

}  // namespace

int verify_plan(const Config& chosen, const LayoutEstimate& predicted, const VerifyRequest& r) {
  const char* launcher = std::getenv("FEAST_MPIEXEC");
  const std::string mpiexec = launcher && *launcher ? launcher : "mpiexec";
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) throw Error("plan --verify: cannot find this executable (/proc/self/exe)");
  std::filesystem::create_directories(r.work_dir);
  const std::string run_dir = r.work_dir + "/run", log_path = r.work_dir + "/verify.log";
  std::filesystem::remove_all(run_dir);
  // The run's own threads are the ones the plan counted (the CPU attention keeps scratch per
  // thread); nothing resumes from or writes a checkpoint.
  const std::vector<std::string> run = {self, r.config_file, "--set", "training.steps=" + std::to_string(kVerifySteps),
                                        "--set", "training.eval_interval=0", "--set", "checkpoint.interval=0",
                                        "--set", "checkpoint.resume=\"never\"", "--set",
                                        "checkpoint.dir=\"" + r.work_dir + "/checkpoints\"", "--set",
                                        "logging.dir=\"" + run_dir + "\"", "--set",
                                        "training.threads=" + std::to_string(r.options.memory.threads)};
  std::vector<std::string> argv = {mpiexec, "--oversubscribe", "--bind-to", "none", "-np", std::to_string(r.gpus)};
  argv.insert(argv.end(), run.begin(), run.end());
  const std::vector<std::string> env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  log::info("");
  log::info("verify: " + mpiexec + " -np " + std::to_string(r.gpus) + " trainer " + r.config_file + " for " +
            std::to_string(kVerifySteps) + " steps (log " + log_path + ")");
  if (run_child(argv, env, log_path, 900) != 0) {
    const std::string last = last_line_of(log_path);
    throw Error("plan --verify: the chosen layout did not run here (" + (last.empty() ? "no output" : last) +
                "; log " + log_path + "); set FEAST_MPIEXEC to the MPI launcher, or verify where " +
                std::to_string(r.gpus) + " ranks of training.device = \"" + chosen.training.device + "\" can run");
  }
  std::ifstream in(run_dir + "/summary.json");
  const nlohmann::json s = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded() || !s.contains("memory_bytes_per_rank") || !s.contains("ms_per_step"))
    throw Error("plan --verify: the run wrote no summary (" + run_dir + "/summary.json)");

  const LayoutPlan plan = plan_layout(chosen, r.gpus);
  const nlohmann::json& measured = s["memory_bytes_per_rank"];
  log::info("verify: memory per rank (MiB), predicted / measured: parameters, gradients, optimizer, activations, "
            "workspace, communication buffers, total");
  double worst = 0;
  for (int rank = 0; rank < r.gpus && rank < int(measured.size()); ++rank) {
    const PlannedMemory p = rank_memory(chosen, plan, rank, r.options.memory);
    const nlohmann::json& m = measured[size_t(rank)];
    double real[6] = {};
    for (size_t i = 0; i < 6 && i < m.size(); ++i) real[i] = m[i].get<double>();
    const double plan_parts[6] = {p.parameters, p.gradients, p.optimizer, p.activations, p.workspace, p.communication};
    std::string line = printed("  rank %3d stage %2d |", rank, plan.layout.coord(rank).pp);
    double real_total = 0;
    for (int i = 0; i < 6; ++i) {
      line += printed(" %9.2f / %9.2f", plan_parts[i] / 1048576.0, real[i] / 1048576.0);
      real_total += real[i];
    }
    line += printed(" | %9.2f / %9.2f (%s)", p.reported() / 1048576.0, real_total / 1048576.0,
                      percent_off(p.reported(), real_total).c_str());
    if (real_total > 0) worst = std::max(worst, std::abs(p.reported() - real_total) / real_total);
    log::info(line);
  }
  const double measured_ms = s["ms_per_step"].get<double>(), predicted_ms = predicted.time.step_s() * 1e3;
  log::info(printed("verify: step time predicted %.2f ms, measured %.2f ms (%s, the mean of %d steps after the first)",
                      predicted_ms, measured_ms, percent_off(predicted_ms, measured_ms).c_str(), kVerifySteps - 1));
  if (!r.machine_figures)
    log::info("verify: the prediction used figures of another machine; `trainer plan CONFIG --gpus N --calibrate` "
              "measures this one's, and later plans use them");
  log::info(formatted("verify: memory per rank within %.1f%% of the prediction", 100 * worst));
  return 0;
}

}  // namespace feast
