// Finite-difference gradient checking in float64 for the CPU ops: each op's backward is
// compared with central differences of L = sum(R * op(x)) for a fixed random R.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace feast::testing {

inline std::vector<double> random_vector(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

inline double dot(const std::vector<double>& a, const double* b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares analytic[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h for every i; `loss`
// recomputes the forward from x. Reports the worst element.
inline void expect_gradient_matches(const std::string& what, std::vector<double>& x,
                                    const std::vector<double>& analytic,
                                    const std::function<double()>& loss, double tol = 1e-6) {
  ASSERT_EQ(x.size(), analytic.size());
  const double h = 1e-5;
  double worst = 0;
  size_t worst_i = 0;
  double worst_fd = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double fd = (plus - minus) / (2 * h);
    const double err = std::abs(fd - analytic[i]) / (1e-3 + std::abs(fd));
    if (err > worst) {
      worst = err;
      worst_i = i;
      worst_fd = fd;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst element " << worst_i << " analytic "
                        << analytic[worst_i] << " vs finite difference " << worst_fd;
}

}  // namespace feast::testing
