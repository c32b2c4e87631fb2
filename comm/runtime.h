// The process's place in the job: MPI start-up and shut-down, rank and world size, and ending
// every rank when one fails (design invariant 6: a rank that fails alone must not leave the
// others waiting). Nothing outside parallel/ calls MPI.
//
// MPI is initialised asking for MPI_THREAD_MULTIPLE and needing MPI_THREAD_FUNNELED: the process
// has threads (OpenMP's, a GPU runtime's helpers) and training calls MPI from the main thread
// only; the asynchronous checkpoint writer (checkpoint.async) also calls it from its own thread,
// which needs MULTIPLE and checks that it was granted. A level below FUNNELED is refused at
// start, since an MPI built without thread support may then misbehave.
#pragma once

#include <string>

namespace feast {

class Runtime {
 public:
  // MPI_Init_thread (a plain `./trainer` runs as a world of one). Throws feast::Error, after
  // shutting MPI down, when the thread level granted is below the one needed.
  Runtime(int* argc, char*** argv);
  ~Runtime();  // MPI_Finalize
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // "funneled (needed: funneled)": what MPI granted, for --version and the start-up banner.
  std::string thread_support() const;

  // Ends the whole job with `code` on every rank; used after a fatal error on this rank.
  [[noreturn]] void abort_job(int code);

 private:
  int rank_ = 0;
  int world_size_ = 1;
  int thread_level_ = 0;
};

// Whether MPI may be called from several threads at once (MPI_THREAD_MULTIPLE was granted);
// true when MPI is not initialised (a process of its own needs no MPI).
bool mpi_thread_multiple();

}  // namespace feast
