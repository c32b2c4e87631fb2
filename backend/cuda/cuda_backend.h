// The CUDA backend: every op of backend/backend.h on one GPU, in float32 or bfloat16 compute
// (parameters and activations; gradients, optimizer state and statistics stay float32). Kernels
// are our own (one .cu file per op, backend/cuda/kernels.h), matrix products go through cuBLASLt,
// memory through one caching allocator. Only built with FEAST_WITH_CUDA; this header names no
// CUDA type, so host code that picks a backend needs no CUDA headers.
#pragma once

#include <cstddef>
#include <memory>

#include "core/dtype.h"
#include "backend/backend.h"

namespace feast {

// A backend on GPU `device_index` computing in `compute` (kFloat32 or kBFloat16). Throws
// feast::Error when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device_index, DType compute);

}  // namespace feast
