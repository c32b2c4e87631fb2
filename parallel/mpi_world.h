// The job's world communicator over MPI, for code that must not see MPI types (main, tests):
// a private duplicate of MPI_COMM_WORLD whose waits time out after default_timeout.
#pragma once

#include <chrono>
#include <memory>

#include "core/communicator.h"

namespace feast {

std::unique_ptr<Communicator> make_mpi_world(std::chrono::milliseconds default_timeout);

}  // namespace feast
