#include "checkpoint/async_checkpoint_writer.h"

#include <mpi.h>

#include <exception>

#include "checkpoint/checkpoint_store.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "comm/agreement.h"
#include "comm/mpi_communicator.h"
#include "comm/runtime.h"

namespace feast {

AsyncCheckpointWriter::AsyncCheckpointWriter(std::unique_ptr<Communicator> comm, std::string dir, int keep)
    : comm_(std::move(comm)), dir_(std::move(dir)), keep_(keep) {
  // Even a group of one goes through MPI-IO when it is an MPI communicator.
  if (mpi_comm_of(*comm_) != MPI_COMM_NULL && !mpi_thread_multiple())
    throw ConfigError("checkpoint.async = true needs an MPI library that grants MPI_THREAD_MULTIPLE (the writer "
                      "thread communicates while training does); this one does not: set checkpoint.async = false");
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (!thread_.joinable()) return;
  if (std::uncaught_exceptions() > 0) {
    // The job is failing. When every rank fails alike the save completes and the process may
    // shut MPI down after it; when a peer is gone it never will, and the job is about to be
    // aborted anyway. Nothing half-written is ever committed.
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished_.wait_for(lock, std::chrono::minutes(1), [this] { return done_; })) {
      // The thread still uses this object and the model's table, and MPI must not be shut down
      // under it: end the job here. The temporary file is never committed.
      log::error("checkpoint: a save was still being written a minute after the run failed; ending the job");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  thread_.join();
}

void AsyncCheckpointWriter::begin(const RankState& state, const CheckpointMeta& meta, Communicator& world) {
  wait(world);
  if (snapshot_) snapshot_->capture(state, meta);
  else snapshot_ = std::make_unique<CheckpointSnapshot>(state, meta);
  path_.reset();
  error_.clear();
  done_ = false;
  thread_ = std::thread([this] {
    try {
      Timer timer;
      const int64_t step = snapshot_->step();
      path_ = CheckpointStore(dir_).save(*comm_, step, keep_,
                                         [&](const std::string& tmp) { snapshot_->write(tmp, *comm_); });
      char took[64];
      std::snprintf(took, sizeof took, " in the background (%.2f s)", timer.seconds());
      log::info("checkpoint: step " + std::to_string(step) + " saved to " + *path_ + took);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    finished_.notify_all();
  });
}

std::optional<std::string> AsyncCheckpointWriter::wait(Communicator& world) {
  const bool was_running = thread_.joinable();
  if (was_running) thread_.join();
  // Every rank takes part, whether or not a save was in flight on it (they all are, or none).
  agree_on_error(world, was_running ? error_ : "");
  return was_running ? path_ : std::nullopt;
}

}  // namespace feast
