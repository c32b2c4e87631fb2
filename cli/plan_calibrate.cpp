#include "cli/plan_calibrate.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/cpu/blas_library.h"
#include "cli/child_process.h"
#include "core/error.h"
#include "core/formatted.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/flop_count.h"
#include "plan/machine_constants.h"
#include "tools/bench/bench_step.h"

namespace feast {
namespace {

// The link between two ranks of this host: bench comm's ping-pong fit, through mpiexec
// ($FEAST_MPIEXEC, else mpiexec on PATH). Nothing, with why in `why`, when it cannot run.
std::optional<Link> measure_link(const std::string& work, std::string& why) {
  const char* launcher = std::getenv("FEAST_MPIEXEC");
  const std::string mpiexec = launcher && *launcher ? launcher : "mpiexec";
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) {
    why = "cannot find this executable (/proc/self/exe)";
    return std::nullopt;
  }
  const std::string json = work + "/bench-comm.json", log = work + "/bench-comm.log";
  const std::vector<std::string> bench = {self, "bench", "comm", "--max-bytes", "4M", "--iters", "20", "--json", json};
  // Open MPI's words first (two ranks on one core are fine, unbound); any other mpiexec plainly.
  std::vector<std::string> open_mpi = {mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "2"};
  open_mpi.insert(open_mpi.end(), bench.begin(), bench.end());
  std::vector<std::string> plain = {mpiexec, "-np", "2"};
  plain.insert(plain.end(), bench.begin(), bench.end());
  const std::vector<std::string> env = {"OMP_NUM_THREADS=1", "OMPI_ALLOW_RUN_AS_ROOT=1",
                                        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  if (run_child(open_mpi, env, log, 180) != 0 && run_child(plain, env, log, 180) != 0) {
    const std::string last = last_line_of(log);
    why = "`" + mpiexec + " -np 2 trainer bench comm` failed (" + (last.empty() ? "no output" : last) + "; log " +
          log + "; set FEAST_MPIEXEC to the MPI launcher)";
    return std::nullopt;
  }
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("fit") || !j["fit"].is_object()) {
    why = "bench comm wrote no α-β fit (" + json + ")";
    return std::nullopt;
  }
  const double alpha = j["fit"].value("alpha_s", 0.0), beta = j["fit"].value("beta_s_per_byte", 0.0);
  if (!(beta > 0)) {
    why = "bench comm's fit has no bandwidth term";
    return std::nullopt;
  }
  return Link{1.0 / beta, alpha};
}

}  // namespace

int calibrate_plan(const Config& config, const CalibrateRequest& r) {
  const ModelConfig& mc = config.model;
  const int B = config.parallel.micro_batch_size > 0 ? config.parallel.micro_batch_size : 1;
  const int T = config.training.seq_len;
  const MachineIdentity machine = this_machine();
  log::info("plan --calibrate: measuring this machine (" + machine.describe() + ") for training.device = \"" +
            config.training.device + "\", " + std::to_string(r.ranks_per_node) + " rank(s) per host of " +
            std::to_string(r.threads) + " thread(s)");

  // Compute: full training steps of the config's model at one rank's micro-batch, on one rank's
  // threads: two warm-up steps, then steps while the budget lasts (at least one, at most 50).
  omp_set_num_threads(r.threads);
  StepBenchOptions o;
  o.model = mc;
  o.shapes = {{B, T}};
  o.device = config.training.device;
  o.dtype = config.training.dtype;
  o.warmup = 2;
  o.steps = 50;
  const StepTiming timed = measure_step_seconds(o, r.seconds);
  const double step = timed.median_s;
  const double tflops = training_flops_per_token(mc, T) * double(B) * T / step / 1e12;
  log::info("compute: " + std::to_string(timed.steps) + " steps of " + std::to_string(B) + " x " + std::to_string(T) +
            " tokens, median " + formatted("%.1f", step * 1e3) + " ms: " + formatted("%.4g", tflops) +
            " TFLOP/s per rank (6N + 6LTC)");

  MachineConstants c;
  c.machine = machine;
  c.device = config.training.device;
  c.measured_at = utc_stamp("%Y-%m-%d %H:%M UTC");
  c.measured_on = mc.arch + " " + std::to_string(mc.n_layer) + " layers x " + std::to_string(mc.n_embd) + ", " +
                  std::to_string(B) + " x " + std::to_string(T) + " tokens";
  c.tflops = tflops;
  c.threads = r.threads;
  c.ranks_per_node = r.ranks_per_node;
  if (c.device == "cpu") c.cpu_kernels = cpu::cpu_kernels_id();

  // The link: between two ranks of this host (a GPU run's NCCL links are another matter: given
  // by flags).
  if (config.training.device == "cpu") {
    const std::filesystem::path work = std::filesystem::temp_directory_path() /
                                       ("feast-calibrate-" + std::to_string(getpid()));
    std::filesystem::create_directories(work);
    std::string why;
    c.link = measure_link(work.string(), why);
    std::error_code ec;
    if (c.link) {
      log::info("link: two ranks through MPI, " + formatted("%.3g", c.link->bandwidth / 1e9) + " GB/s and " +
                formatted("%.3g", c.link->latency * 1e6) + " us per message (bench comm's fit)");
      std::filesystem::remove_all(work, ec);
    } else {
      log::info("link: not measured: " + why + "; plans use the default links (or --intra-node-bw, --latency)");
    }
  } else {
    log::info("link: not measured on a GPU (NCCL between GPUs: `mpirun -np 2 trainer bench comm --device cuda --backend nccl`, "
              "then --intra-node-bw and --latency)");
  }
  write_machine_constants(r.path, c);
  log::info("wrote " + r.path + ": `trainer plan` uses these figures on this machine from now on (flags override "
            "them; --constants FILE reads another file)");
  return 0;
}

}  // namespace feast
