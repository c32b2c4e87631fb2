#include "cli/plan_calibrate.h"

#include <fcntl.h>
#include <omp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "backend/cpu/blas_library.h"
#include "core/error.h"
#include "core/formatted.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/flop_count.h"
#include "plan/machine_constants.h"
#include "tools/bench/bench_step.h"
#include "train/stop_signals.h"

extern char** environ;

namespace feast {
namespace {

// Runs argv with this environment less what ties a process to this one's MPI job (a singleton's
// PMIx and Open MPI settings would make the child's mpiexec join it), plus `extra`; its output
// into `log`. The exit status, or -1 when it could not start or ran past `timeout_s` (killed).
int run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra, const std::string& log,
              double timeout_s) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.starts_with("PMIX_") || v.starts_with("PMI_") || v.starts_with("OMPI_COMM_WORLD") ||
        v.starts_with("OMPI_MCA_ess") || v.starts_with("OMPI_MCA_pmix") || v.starts_with("OMPI_MCA_orte") ||
        v.starts_with("OMPI_FILE_LOCATION") || v.starts_with("OMPI_UNIVERSE") || v.starts_with("OMPI_FIRST_RANKS"))
      continue;
    env.push_back(v);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  // The child starts with the stop signals unblocked and at their default actions: a signal
  // mask is inherited across exec, and this process blocks them in every thread.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &stop_signal_set());
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    std::ofstream(log, std::ios::app) << argv[0] << ": " << std::strerror(rc) << "\n";
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (done < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::ofstream(log, std::ios::app) << "killed after " << timeout_s << " s\n";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

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
    std::ifstream in(log);
    std::string last, line;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
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
