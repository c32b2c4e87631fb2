#include "core/device.h"

namespace feast {

std::string Device::name() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace feast
