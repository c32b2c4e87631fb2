#include "backend/cpu/adamw.h"

#include <algorithm>
#include <vector>

namespace feast::cpu {

void adamw_step(float* params, float* m, float* v, const float* grads, size_t n,
                const AdamWStep& step, float grad_scale) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) adamw_update(params[i], m[i], v[i], grads[i] * grad_scale, step);
}

double sum_of_squares(const float* x, size_t n) {
  constexpr size_t kChunk = size_t{1} << 16;
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk, end = std::min(n, begin + kChunk);
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += double(x[i]) * double(x[i]);
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace feast::cpu
