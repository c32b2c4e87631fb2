#include "comm/runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "core/error.h"

namespace feast {
namespace {

constexpr int kNeededThreadLevel = MPI_THREAD_FUNNELED;
constexpr int kWantedThreadLevel = MPI_THREAD_MULTIPLE;

const char* level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "single";
    case MPI_THREAD_FUNNELED: return "funneled";
    case MPI_THREAD_SERIALIZED: return "serialized";
    case MPI_THREAD_MULTIPLE: return "multiple";
  }
  return "unknown";
}

}  // namespace

Runtime::Runtime(int* argc, char*** argv) {
  MPI_Init_thread(argc, argv, kWantedThreadLevel, &thread_level_);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  if (thread_level_ < kNeededThreadLevel) {
    MPI_Finalize();
    throw Error(std::string("the MPI library granted thread support '") + level_name(thread_level_) +
                "', but feast needs '" + level_name(kNeededThreadLevel) +
                "' (OpenMP threads run beside MPI); use an MPI built with thread support");
  }
}

Runtime::~Runtime() { MPI_Finalize(); }

std::string Runtime::thread_support() const {
  return std::string(level_name(thread_level_)) + " (needed: " + level_name(kNeededThreadLevel) + ")";
}

bool mpi_thread_multiple() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return true;
  int level = 0;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_MULTIPLE;
}

void Runtime::abort_job(int code) {
  if (world_size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  std::exit(code);
}

}  // namespace feast
