#include "train/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/plural.h"

namespace feast {
namespace {

bool first_attempt() {
  const char* attempt = std::getenv("FEAST_ATTEMPT");
  return !attempt || std::string(attempt).empty() || std::string(attempt) == "1";
}

}  // namespace

void check_fault_ranks(const Config& config, int world_size) {
  const FaultConfig& fault = config.fault;
  for (const auto& [key, rank] : {std::pair{"fault.kill_rank", fault.kill_rank}, std::pair{"fault.stall_rank", fault.stall_rank}})
    if (rank >= world_size)
      throw ConfigError(config.where(key) + ": " + key + " = " + std::to_string(rank) + " is not a rank of this job of " +
                        count_of(world_size, "rank") + "; give a rank from 0 to " + std::to_string(world_size - 1) +
                        ", or -1 for none");
}

void maybe_inject_fault(const FaultConfig& fault, int world_rank, int64_t step) {
  if (step != fault.at_step || !first_attempt()) return;
  if (world_rank == fault.kill_rank) {
    log::error("fault injection: rank " + std::to_string(world_rank) + " kills itself (SIGKILL) at step " +
               std::to_string(step));
    std::fflush(nullptr);
    raise(SIGKILL);
  }
  if (world_rank == fault.stall_rank) {
    log::error("fault injection: rank " + std::to_string(world_rank) + " stalls at step " + std::to_string(step));
    std::fflush(nullptr);
    for (;;) pause();  // signals run their handlers and the stall goes on
  }
}

}  // namespace feast
