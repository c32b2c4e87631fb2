// The process's place in the job: MPI start-up and shut-down, rank and world size, and ending
// every rank when one fails (design invariant 6: a rank that fails alone must not leave the
// others waiting). Nothing outside parallel/ calls MPI.
#pragma once

namespace feast {

class Runtime {
 public:
  Runtime(int* argc, char*** argv);  // MPI_Init (a plain `./trainer` runs as a world of one)
  ~Runtime();                        // MPI_Finalize
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Ends the whole job with `code` on every rank; used after a fatal error on this rank.
  [[noreturn]] void abort_job(int code);

 private:
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace feast
