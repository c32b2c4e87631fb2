#include "model/backend.h"

#include "core/error.h"
#include "model/cpu/cpu_backend.h"

namespace feast {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  throw ConfigError("training.device = \"" + device + "\": this build has no backend for it; use \"cpu\"");
}

}  // namespace feast
