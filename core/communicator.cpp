// Element sizes of the communicator's data types (the only code core/communicator.h needs).
#include "core/communicator.h"

#include <cstdint>

namespace feast {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return sizeof(float);
    case DType::kFloat64: return sizeof(double);
    case DType::kInt32: return sizeof(int32_t);
    case DType::kInt64: return sizeof(int64_t);
  }
  return 0;  // unreachable: every enumerator is handled above (-Wswitch checks it)
}

}  // namespace feast
