// Deliberate failures for testing recovery (the [fault] config section): at the start of step
// fault.at_step, rank fault.kill_rank kills itself with SIGKILL (no handler, no flush: a crash)
// and rank fault.stall_rank stops making progress forever (a hung GPU, a deadlock), which the
// other ranks' watchdog must catch. Only the first attempt of a job acts: FEAST_ATTEMPT, which
// scripts/run-resilient.sh sets, is unset or 1.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace feast {

// Called by every rank before it runs step `step` (1-based).
void maybe_inject_fault(const FaultConfig& fault, int world_rank, int64_t step);

}  // namespace feast
