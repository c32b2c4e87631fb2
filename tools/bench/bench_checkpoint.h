// `[mpirun -np N] trainer bench --checkpoint`: how fast checkpoints of GPT-2 124M (or a model
// given by flags) are saved and loaded, next to a plain sequential write and read of the same
// number of bytes to the same directory; with N ranks each holds a data-parallel shard (ZeRO 1)
// and the save and load are the parallel ones. Reads are cold: the files are dropped from the
// page cache first. A synchronous save stalls training for its whole duration; an asynchronous
// one (checkpoint.async) only while the state is copied to host memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace feast {

int bench_checkpoint_command(const std::vector<std::string>& args, std::unique_ptr<Communicator> world);

}  // namespace feast
