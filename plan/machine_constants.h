// The figures `trainer plan` predicts step times with, as measured on one machine by
// `trainer plan --calibrate` (cli/plan_calibrate.cpp) and kept in a small JSON file that later
// plans on the same machine use by default. The defaults of Cluster (cost_model.h) describe an
// H100 SXM node: on any other machine they put step times off by several times, so a plan says
// which figures it used, and that calibrating would measure this machine's.
#pragma once

#include <optional>
#include <string>

#include "plan/cost_model.h"

namespace feast {

// Which machine a file describes: what, changed, makes its figures stale.
struct MachineIdentity {
  std::string host, cpu, gpu;  // host name; /proc/cpuinfo's model name; CUDA's device name or ""
  int cores = 0;               // physical cores this process may use
  bool operator==(const MachineIdentity&) const = default;
  std::string describe() const;  // "host h1, Intel(R) Xeon(R) Processor, 2 cores"
};
MachineIdentity this_machine();

struct MachineConstants {
  MachineIdentity machine;
  std::string device;         // "cpu" or "cuda": a cuda run is not planned with a CPU's rate
  std::string measured_at;    // UTC, "2026-12-03 12:00 UTC"
  std::string measured_on;    // what the rate was measured on: "gpt2 4 layers x 128, 8 x 64 tokens"
  double tflops = 0;          // achieved TFLOP/s per rank in the model's 6N + 6LTC count
  int threads = 0;            // OpenMP threads per rank it was measured with (CPU)
  int ranks_per_node = 0;     // ranks sharing the host it was measured for
  std::string cpu_kernels;    // the CPU's BLAS kernels it was measured with (cpu_kernels_id(); "" on a GPU)
  std::optional<Link> link;   // α and 1/β of bench comm's ping-pong fit between two ranks
};

// Where plan keeps them: $FEAST_PLAN_CONSTANTS, else $XDG_CACHE_HOME/feast/plan-constants.json,
// else ~/.cache/feast/plan-constants.json.
std::string default_constants_path();

// The file at path; nothing when there is none. Throws ConfigError naming the path and the fix
// when it is there but cannot be read as one.
std::optional<MachineConstants> read_machine_constants(const std::string& path);
// Atomically (a plan reading it meanwhile sees the old file or the new one).
void write_machine_constants(const std::string& path, const MachineConstants& constants);

// The figures a plan of a `device` run uses where the command line leaves them: this machine's
// from `path` when they were measured here for that device (on the CPU, with the BLAS kernels
// the CPU backend runs now: another library or core changes the rate); else the defaults, with why. This
// machine's identity (which asks CUDA for its GPU) is looked up only when there is a file.
struct ConstantsChoice {
  std::optional<MachineConstants> used;  // nothing: Cluster's defaults
  std::string said;                      // one line for the plan's heading
};
ConstantsChoice choose_machine_constants(const std::string& path, const std::string& device);

}  // namespace feast
