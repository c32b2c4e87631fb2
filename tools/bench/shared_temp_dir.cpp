#include "tools/bench/shared_temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "comm/agreement.h"

namespace feast {

SharedTempDir::SharedTempDir(Communicator& group, const std::string& prefix) : owner_(group.rank() == 0) {
  std::string made = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string(), error;
  if (owner_ && !::mkdtemp(made.data())) {
    error = "cannot create a temporary directory like " + made + ": " + std::strerror(errno);
    owner_ = false;
  }
  agree_on_error(group, error);
  path_ = broadcast_string(group, made, 0);
}

SharedTempDir::~SharedTempDir() {
  std::error_code ec;
  if (owner_) std::filesystem::remove_all(path_, ec);
}

}  // namespace feast
