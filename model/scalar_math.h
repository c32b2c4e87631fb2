// Scalar formulas shared by the CPU and CUDA backends (FEAST_HD): GELU (tanh form) and its
// derivative, and the AdamW update of one element. Kernels on both sides call these, so the CPU
// tests exercise the GPU's arithmetic too.
#pragma once

#include <cmath>

#include "core/host_device.h"

namespace feast {

// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
FEAST_HD T gelu_tanh(T x) {
  const T s = T(0.7978845608028654);  // sqrt(2/pi)
  const T u = s * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}

template <typename T>
FEAST_HD T gelu_tanh_grad(T x) {
  const T s = T(0.7978845608028654);
  const T x2 = x * x;
  const T u = s * (x + T(0.044715) * x2 * x);
  const T th = std::tanh(u);
  const T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * s * (T(1) + T(3 * 0.044715) * x2);
}

// One AdamW step of one element, in PyTorch's order of operations (decoupled decay first,
// then the bias-corrected Adam step), so golden data from torch.optim.AdamW matches closely.
struct AdamWStep {
  float lr;
  float beta1, beta2, eps;
  float weight_decay;
  float bias_correction1;       // 1 - beta1^t
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

FEAST_HD void adamw_update(float& param, float& m, float& v, float grad, const AdamWStep& s) {
  m = s.beta1 * m + (1.0f - s.beta1) * grad;
  v = s.beta2 * v + (1.0f - s.beta2) * grad * grad;
  param *= 1.0f - s.lr * s.weight_decay;
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  param -= (s.lr / s.bias_correction1) * m / denom;
}

}  // namespace feast
