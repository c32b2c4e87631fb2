// A run's directory (logging.dir): what a reader needs to tell what ran and how it ended, and
// the guard that keeps two runs from writing into one directory at once.
//  - With no logging.dir, a run gets its own, runs/<config name>-<UTC date-time>, printed at
//    start; but when the newest such directory of this config holds a run that did not finish
//    and left a checkpoint (preempted, crashed), the same command continues it there.
//  - Rank 0 holds an exclusive lock (flock on .lock) for the run's life: a second run into a
//    directory in use is refused, naming it; the lock goes with the process, so a crashed run's
//    directory is free again. (A file system without flock cannot guard it: a warning says so.)
//  - checkpoint.dir is made, locked the same way (its own .lock, unless it is the run
//    directory) and proved writable by rank 0 and seen by every rank (CheckpointStore::
//    prove_shared) at the start, before the first step.
//  - command.txt holds the command line; train.log everything rank 0 printed (appended, one
//    header per run); status the end marker: "running" until "finished at step N", "stopped
//    at step N (preempted)" and the like, or "failed: <error>". A status still
//    "running" whose lock is free is a run that died.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "config/config.h"

namespace feast {

class RunDirectory {
 public:
  // Collective over `world`: settles config.logging.dir (and with it the default
  // checkpoint.dir), creates the directory and checkpoint.dir and takes their locks. Throws
  // AgreedError on every rank when either is in use or cannot be made (or written), or when a
  // rank does not see rank 0's checkpoint.dir.
  RunDirectory(Config& config, Communicator& world);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // Rank 0: writes the end marker ("finished at step 20", ...) to status and train.log.
  void finish(const std::string& status);

 private:
  void release();  // rank 0: stops writing train.log and drops the locks

  std::string dir_;
  int lock_fd_ = -1;
  int checkpoint_lock_fd_ = -1;
  bool rank0_ = false;
};

}  // namespace feast
