// `mpirun -np N trainer bench --parallel`: the communication bandwidth of the world (all-reduce
// algbw/busbw by message size, as `trainer bench comm` measures it) and, for every dp x pp x tp
// layout of N ranks (and each --micro-batches count), training throughput, where each step's
// time goes (compute, tensor-parallel communication, data-parallel communication, pipeline idle,
// data loading, optimizer) averaged over ranks, the measured pipeline bubble next to
// (p-1)/(m+p-1), and E = compute / (compute + tp-comm + dp-comm + pp-idle).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace feast {

int bench_parallel_command(const std::vector<std::string>& args, std::unique_ptr<Communicator> world);

}  // namespace feast
