// The job's world communicator over MPI, for code that must not see MPI types (main, tests):
// a private duplicate of MPI_COMM_WORLD whose waits time out after default_timeout. max_count
// is the most elements one MPI call may carry (larger calls are split); tests lower it to
// exercise the splitting without gigabytes of data.
#pragma once

#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>

#include "core/communicator.h"

namespace feast {

std::unique_ptr<Communicator> make_mpi_world(std::chrono::milliseconds default_timeout,
                                             size_t max_count = size_t{INT_MAX});

}  // namespace feast
