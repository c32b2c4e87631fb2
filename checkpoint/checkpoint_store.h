// A directory of checkpoints, one file per save, named for its step (step_00000020.h5), and
// the discipline that keeps it trustworthy when a job dies at any moment:
//  - a checkpoint is written under a temporary name (.step_00000020.h5.tmp) by every rank;
//  - only after every rank has closed it does rank 0 fsync it, rename it to its final name and
//    fsync the directory, so a file with a final name is complete;
//  - then `latest` (for people and other tools; the trainer itself trusts only final names) is
//    replaced atomically; checkpoints of later steps than the new one (an abandoned timeline) are
//    renamed `*.superseded`; and checkpoints beyond `keep` are deleted, oldest first, never the
//    new one.
// Before writing, it checks that every rank sees the directory rank 0 commits in.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace feast {

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  static std::string file_name(int64_t step);  // "step_00000020.h5"

  // Complete checkpoints in the directory (final names only), newest step first; empty when the
  // directory does not exist.
  std::vector<std::string> complete() const;
  // The step in a checkpoint's file name, or -1.
  static int64_t step_of(const std::string& path);
  // Renames a checkpoint to `<path>.<reason>` ("corrupt", "superseded"), so that it no longer
  // counts as complete but stays for a person to look at.
  static void set_aside(const std::string& path, const std::string& reason);

  // Collective over `world`: rank 0 makes the directory and writes `token` into a probe file
  // there, and every rank reads it back through its own path to the directory, so a directory
  // rank 0 cannot write, or one a rank sees under its name but not shared (node-local), is found
  // before anything is written into it. Throws AgreedError on every rank, naming the directory.
  // The probe is removed again.
  void prove_shared(Communicator& world, const std::string& token) const;

  // Collective over `world`: makes the directory, calls write(temporary path) on every rank
  // (itself collective), then commits as described above and keeps the newest `keep`. Returns
  // the final path. Throws on every rank alike (CheckpointError for the write, feast::Error for
  // the directory and the commit) naming the path; nothing is committed after a failed write.
  std::string save(Communicator& world, int64_t step, int keep, const std::function<void(const std::string&)>& write);

 private:
  std::string dir_;
};

}  // namespace feast
