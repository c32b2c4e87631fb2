// Fused AdamW on the CPU: one pass over a contiguous range of the flat buffers reads the
// gradient, updates both moments and the parameter (PyTorch's unfused AdamW makes several).
#pragma once

#include <cstddef>

#include "backend/scalar_math.h"

namespace feast::cpu {

// params, m, v (n) updated in place from grads (n) * grad_scale (the clipping factor).
void adamw_step(float* params, float* m, float* v, const float* grads, size_t n,
                const AdamWStep& step, float grad_scale);

// Sum of squares of x (n), in double, summed in a fixed order of fixed-size chunks so the result
// does not depend on the number of threads.
double sum_of_squares(const float* x, size_t n);

}  // namespace feast::cpu
