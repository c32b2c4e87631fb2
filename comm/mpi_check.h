// FEAST_MPI_CHECK: the project's check macro specialised for MPI. A failed call throws
// feast::Error naming MPI's error string, the call, the place and the world rank, so a message
// from one rank of many says who failed and where. Communicators must use MPI_ERRORS_RETURN
// (the default handler aborts before we could say any of that).
#pragma once

#include <mpi.h>

#include <sstream>
#include <string>

#include "core/error.h"

namespace feast::detail {

[[noreturn]] inline void throw_mpi_failure(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::ostringstream os;
  os << "MPI error on rank " << rank << ": " << (length > 0 ? std::string(text, length) : "code " + std::to_string(code))
     << " (in `" << call << "` at " << file << ":" << line << ")";
  throw Error(os.str());
}

}  // namespace feast::detail

#define FEAST_MPI_CHECK(call)                                                \
  do {                                                                       \
    const int feast_mpi_rc_ = (call);                                        \
    if (feast_mpi_rc_ != MPI_SUCCESS)                                        \
      ::feast::detail::throw_mpi_failure(feast_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
