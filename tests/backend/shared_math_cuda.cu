// The shared scalar formulas compiled by nvcc as CUDA C++20: on the host (the values the test
// compares with the C++ compiler's) and in a kernel (device code must compile too; the test
// never launches it, so no GPU is needed).
#include <cstdint>
#include <vector>

#include "tests/backend/shared_math_probe.h"

namespace feast::testing {

std::vector<double> shared_math_probe_nvcc() { return shared_math_probe(); }

__global__ void shared_math_kernel(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = in[i];
  float p = x, m = 0.0f, v = 0.0f;
  adamw_update(p, m, v, x, AdamWStep{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.2f});
  out[i] = fast_exp(x) + fast_tanh(x) + gelu_tanh(x) + gelu_tanh_grad(x) + silu(x) + silu_grad(x) + p +
           bf16_to_float(float_to_bf16(x)) + float(normal_at(7, 3, uint64_t(i))) + float(uniform_index(7, 3, i, 97));
}

}  // namespace feast::testing
