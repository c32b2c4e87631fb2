// `mpirun -np N trainer bench --parallel`: the communication bandwidth of the world (all-reduce
// algbw/busbw by message size, nccl-tests style) and, for every dp x pp x tp layout of N ranks,
// training throughput and where each step's time goes (compute, tensor-parallel communication,
// data-parallel communication, pipeline idle, optimizer), averaged over ranks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace feast {

int bench_parallel_command(const std::vector<std::string>& args, std::unique_ptr<Communicator> world);

}  // namespace feast
