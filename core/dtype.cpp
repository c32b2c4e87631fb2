#include "core/dtype.h"

namespace feast {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return sizeof(float);
    case DType::kFloat64: return sizeof(double);
    case DType::kInt32: return sizeof(int32_t);
    case DType::kInt64: return sizeof(int64_t);
    case DType::kBFloat16: return sizeof(uint16_t);
    case DType::kUInt8: return sizeof(uint8_t);
  }
  return 0;  // unreachable: every enumerator is handled above (-Wswitch checks it)
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kUInt8: return "uint8";
  }
  return "?";
}

}  // namespace feast
