// Element types of tensors and of the data the communicators move. Parameters and activations
// are kFloat32 on the CPU and may be kBFloat16 on a GPU; gradients, master weights and
// optimizer moments are always kFloat32; token ids are kInt32; kFloat64 is for reductions that
// must not lose precision (losses, norms) and for the finite-difference tests; kUInt8 holds
// packed codes (a 4-bit quantized base, model/quantized_base.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace feast {

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kUInt8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32", "bfloat16", ...

// The DType of a C++ element type (float, double, int32_t, int64_t, uint8_t).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <>
constexpr DType dtype_of<double>() { return DType::kFloat64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::kInt64; }
template <>
constexpr DType dtype_of<uint8_t>() { return DType::kUInt8; }

}  // namespace feast
