// `mpirun -np N trainer bench parallel`: the communication bandwidth of the world (all-reduce
// algbw/busbw by message size, as `trainer bench comm` measures it) and, for every dp x pp x tp
// layout of N ranks (and each micro-batch count asked for), training throughput, where each
// step's time goes (compute, tensor-parallel communication, data-parallel communication, pipeline
// idle, data loading, optimizer) averaged over ranks, the measured pipeline bubble next to
// (p-1)/(m+p-1), and E = compute / (compute + tp-comm + dp-comm + pp-idle).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"

namespace feast {

struct BenchLayout {
  int tp, pp, dp;
  std::string name() const {
    return "tp" + std::to_string(tp) + "pp" + std::to_string(pp) + "dp" + std::to_string(dp);
  }
};

struct ParallelBenchOptions {
  ParallelBenchOptions();  // the demo's model (4 layers, 4 heads, 128 channels, bytes), T 64, batch 32
  Config base;             // every run's config but its layout; origins name the flags that set it
  std::vector<BenchLayout> layouts;  // empty: every tp, pp in {1, 2, 4, 8} that fits the world
  std::vector<int> micro_batches;    // per replica, one run each; empty: as the global batch divides
  int steps = 10, warmup = 2;
};

// Collective over `world`; every layout is checked by the trainer's own rules before any runs.
int run_parallel_bench(const ParallelBenchOptions& options, std::unique_ptr<Communicator> world);

}  // namespace feast
