#include "train/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/log.h"

namespace feast {
namespace {

bool first_attempt() {
  const char* attempt = std::getenv("FEAST_ATTEMPT");
  return !attempt || std::string(attempt).empty() || std::string(attempt) == "1";
}

}  // namespace

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
