#include "parallel/runtime.h"

#include <mpi.h>

#include <cstdlib>

namespace feast {

Runtime::Runtime(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

Runtime::~Runtime() { MPI_Finalize(); }

void Runtime::abort_job(int code) {
  if (world_size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  std::exit(code);
}

}  // namespace feast
