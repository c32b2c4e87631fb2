// Saving a checkpoint beside training (checkpoint.async): the step's state is copied into host
// memory (the only time training waits; the memory is kept and reused by later saves), and a thread of its own writes the copy with the same
// collective parallel-HDF5 write and commit as a synchronous save, on a private duplicate of the
// world communicator, while training goes on. A second save first waits for the one in flight.
//
// Its MPI calls (the checksum exchange, MPI-IO, the commit's agreement) run while the training
// thread's run on other communicators, which needs MPI_THREAD_MULTIPLE. HDF5 is not built
// thread-safe, but only this thread calls it while a save is in flight: resuming happens before
// the first save, and the training thread never touches a checkpoint file meanwhile.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "checkpoint/checkpoint_file.h"
#include "comm/communicator.h"

namespace feast {

class AsyncCheckpointWriter {
 public:
  // `comm`: a duplicate of the world that only the writer thread uses. Throws ConfigError when
  // it is an MPI communicator and MPI did not grant MPI_THREAD_MULTIPLE.
  AsyncCheckpointWriter(std::unique_ptr<Communicator> comm, std::string dir, int keep);
  // Waits for a save in flight. During an exception's unwinding it waits at most a minute (the
  // other ranks may be gone, and the save with them) and then ends the job with MPI_Abort.
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Waits for the save in flight (throwing its error, as wait() does), copies this rank's part of
  // the state and starts writing it; returns as soon as the copy is made.
  void begin(const RankState& state, const CheckpointMeta& meta, Communicator& world);
  // Collective over `world` (the training ranks): waits for the save in flight and returns the
  // path it committed (nothing when none was in flight). Throws AgreedError on every rank when
  // it failed on any.
  std::optional<std::string> wait(Communicator& world);

 private:
  std::unique_ptr<Communicator> comm_;
  std::string dir_;
  int keep_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = true;  // the thread has finished its save (guarded by mutex_)
  // Written by the thread, read after joining it.
  std::optional<std::string> path_;
  std::string error_;
  std::unique_ptr<CheckpointSnapshot> snapshot_;  // kept between saves: its memory is reused
};

}  // namespace feast
