// The job's world communicator over MPI, for code that must not see MPI types (main, tests):
// a private duplicate of MPI_COMM_WORLD whose waits time out after default_timeout. max_count
// is the most elements one MPI call may carry (larger calls are split); tests lower it to
// exercise the splitting without gigabytes of data.
#pragma once

#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace feast {

std::unique_ptr<Communicator> make_mpi_world(std::chrono::milliseconds default_timeout,
                                             size_t max_count = size_t{INT_MAX});

// How this process's MPI communicators wait for their requests.
//   kSpin: test without pause (a rank whose threads each have a core: a small collective then
//          costs microseconds, not a scheduler tick);
//   kBackOff: test for 20 us, then sleep 50 us between tests (more ranks than cores: a spinning
//          waiter would take the core from the very rank it waits for).
// kBackOff is the default; the trainer chooses at start (comm/topology/cpu_threads.h, choose_wait_policy).
enum class WaitPolicy { kSpin, kBackOff };
void set_wait_policy(WaitPolicy policy);
WaitPolicy wait_policy();

}  // namespace feast
