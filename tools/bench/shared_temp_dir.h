// A temporary directory every rank of a group agrees on: rank 0 makes it (mkdtemp), the ranks
// agree that it exists, every rank learns its path, and rank 0 removes it with everything in it
// when the object goes, however the work in it ended (the benchmarks' scratch space).
#pragma once

#include <string>

#include "comm/communicator.h"

namespace feast {

class SharedTempDir {
 public:
  // Collective; `prefix` like "feast_bench" (under the system's temporary directory). Throws
  // AgreedError on every rank when rank 0 cannot create it.
  SharedTempDir(Communicator& group, const std::string& prefix);
  ~SharedTempDir();
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owner_ = false;
};

}  // namespace feast
