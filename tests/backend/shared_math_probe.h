// The scalar formulas both backends share (FEAST_HD: core/bfloat16.h, core/rng.h,
// backend/scalar_math.h, backend/dropout_mask.h, backend/moe_route.h) evaluated at fixed arguments. The test compiles this once with the C++
// compiler and once with nvcc as CUDA C++20 (shared_math_cuda.cu) and compares the two lists, so
// the headers a CUDA kernel includes compile under nvcc and compute what the CPU computes.
// Everything here has internal linkage: each translation unit keeps its own compiled copy.
#pragma once

#include <cstdint>
#include <vector>

#include "core/bfloat16.h"
#include "core/rng.h"
#include "backend/dropout_mask.h"
#include "backend/moe_route.h"
#include "backend/scalar_math.h"

namespace feast::testing {
namespace {

inline std::vector<double> shared_math_probe() {
  std::vector<double> out;
  for (float x : {-100.0f, -9.0f, -3.5f, -0.7f, 0.0f, 0.3f, 2.0f, 9.0f, 100.0f}) {
    out.push_back(fast_exp(x));
    out.push_back(fast_tanh(x));
    out.push_back(gelu_tanh(x));
    out.push_back(gelu_tanh_grad(x));
    out.push_back(silu(x));
    out.push_back(silu_grad(x));
    out.push_back(bf16_to_float(float_to_bf16(x * 1.2345f)));
  }
  AdamWStep s{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.3f};
  for (float g : {-0.5f, 0.0f, 1e-6f, 2.0f}) {
    float p = 0.25f, m = 0.01f, v = 1e-4f;
    adamw_update(p, m, v, g, s);
    out.insert(out.end(), {p, m, v});
  }
  for (uint64_t i = 0; i < 8; ++i) {
    out.push_back(normal_at(1337, 42, i));
    out.push_back(double(uniform_index(1337, 42, i, 1000003)));
  }
  DropoutShape d;
  d.N = 6, d.C = 5, d.T = 3, d.first_sequence = 7, d.col0 = 5, d.columns = 20, d.stream = 99, d.p = 0.3f;
  for (int r = 0; r < d.N; ++r)
    for (int c = 0; c < d.C; ++c) out.push_back(dropout_keeps(d, r, c) ? 1.0 : 0.0);
  out.push_back(dropout_scale(0.3f));
  // A router's row of 5 experts: top 3 (a tie between experts 1 and 3), renormalised or not, and
  // the gradient of its logits.
  const float p[5] = {0.1f, 0.25f, 0.05f, 0.25f, 0.35f}, dw[3] = {0.3f, -0.2f, 0.7f}, dprob[5] = {0.01f, 0.0f, -0.02f,
                                                                                                 0.03f, 0.0f};
  for (bool renormalize : {false, true}) {
    int32_t ex[3];
    float w[3], dlogits[5];
    moe_top_k(p, 5, 3, renormalize, ex, w);
    moe_route_grad_row(dlogits, p, 1.7f, ex, w, dw, dprob, 0.05f, 5, 3, renormalize);
    for (int j = 0; j < 3; ++j) out.insert(out.end(), {double(ex[j]), w[j]});
    out.insert(out.end(), dlogits, dlogits + 5);
  }
  return out;
}

}  // namespace
}  // namespace feast::testing
