// A GoogleTest check for float vectors against references: |a - b| <= atol + rtol |b| for every
// element of `expected` (the first expected.size() of `actual`), reporting the worst one.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace feast::testing {

inline void expect_close(const std::string& what, const std::vector<float>& actual,
                         const std::vector<float>& expected, double atol, double rtol) {
  ASSERT_GE(actual.size(), expected.size()) << what;
  double worst = -1;
  size_t worst_i = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double excess = std::abs(double(actual[i]) - expected[i]) - (atol + rtol * std::abs(expected[i]));
    if (excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": element " << worst_i << " is " << actual[worst_i] << ", expected "
                        << expected[worst_i];
}

}  // namespace feast::testing
