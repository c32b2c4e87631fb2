// `[mpirun -np N] trainer bench checkpoint`: how fast checkpoints of GPT-2 124M (or another
// model) are saved and loaded, next to a plain sequential write and read of the same number of
// bytes to the same directory; with N ranks each holds a data-parallel shard (ZeRO 1) and the
// save and load are the parallel ones. Reads are cold: the files are dropped from the page cache
// first. A synchronous save stalls training for its whole duration; an asynchronous one
// (checkpoint.async) only while the state is copied to host memory.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "model/model_config.h"

namespace feast {

struct CheckpointBenchOptions {
  ModelConfig model = ModelConfig::gpt2_124m();
  std::string dir;  // "" = a temporary directory every rank sees, removed after
  int repeat = 3;   // the best of this many
};

int run_checkpoint_bench(const CheckpointBenchOptions& options, std::unique_ptr<Communicator> world);

}  // namespace feast
