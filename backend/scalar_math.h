// Scalar formulas shared by the CPU and CUDA backends (FEAST_HD): exp and tanh that vectorise,
// GELU (tanh form), SiLU and their derivatives, and the AdamW update of one element. Kernels on both sides call these, so the CPU
// tests exercise the GPU's arithmetic too.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace feast {

// exp for float without a library call, so loops over it vectorise (glibc's vector expf needs
// -ffast-math, which the deterministic reference path must not use). Cephes' expf: Cody-Waite
// reduction by ln 2 and a degree-6 polynomial, relative error below 2e-7. The input is clamped
// to [-87.3, 88.37]: exp(-inf) gives 1e-38 rather than 0, which no softmax sum can notice.
// double (the finite-difference tests) uses std::exp.
template <typename T>
FEAST_HD T fast_exp(T x) {
  if constexpr (sizeof(T) == sizeof(double)) {
    return std::exp(x);
  } else {
    x = x < -87.3f ? -87.3f : (x > 88.37f ? 88.37f : x);
    // n = round(x / ln 2) by truncation and a correction (GCC does not vectorise std::floor).
    const float t = x * 1.44269504088896341f + 0.5f;
    int n = static_cast<int>(t);
    n -= static_cast<float>(n) > t ? 1 : 0;
    const float fx = static_cast<float>(n);
    x -= fx * 0.693359375f;
    x -= fx * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * (x * x) + x + 1.0f;
    return y * float_from_bits(static_cast<uint32_t>(n + 127) << 23);  // * 2^n
  }
}

// tanh through fast_exp: 1 - 2 / (exp(2u) + 1), exact at both tails; absolute error ~1e-7.
template <typename T>
FEAST_HD T fast_tanh(T u) {
  if constexpr (sizeof(T) == sizeof(double)) {
    return std::tanh(u);
  } else {
    return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f);
  }
}

// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
FEAST_HD T gelu_tanh(T x) {
  const T s = T(0.7978845608028654);  // sqrt(2/pi)
  const T u = s * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + fast_tanh(u));
}

template <typename T>
FEAST_HD T gelu_tanh_grad(T x) {
  const T s = T(0.7978845608028654);
  const T x2 = x * x;
  const T u = s * (x + T(0.044715) * x2 * x);
  const T th = fast_tanh(u);
  const T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * s * (T(1) + T(3 * 0.044715) * x2);
}

// SiLU (swish), the gate of SwiGLU: x * sigmoid(x), and its derivative s (1 + x (1 - s)).
template <typename T>
FEAST_HD T sigmoid(T x) {
  return T(1) / (T(1) + fast_exp(-x));
}

template <typename T>
FEAST_HD T silu(T x) {
  return x * sigmoid(x);
}

template <typename T>
FEAST_HD T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
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
