#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"

namespace feast {
namespace {

TEST(Rng, SameCounterSameValue) {
  EXPECT_EQ(normal_at(1, 2, 3), normal_at(1, 2, 3));
  EXPECT_NE(normal_at(1, 2, 3), normal_at(1, 2, 4));
  EXPECT_NE(normal_at(1, 2, 3), normal_at(2, 2, 3));
  EXPECT_NE(normal_at(1, 2, 3), normal_at(1, 3, 3));
}

TEST(Rng, NormalMoments) {
  const int n = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = normal_at(7, hash_name("w"), static_cast<uint64_t>(i));
    sum += x;
    sum2 += x * x;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);  // 4.5 standard errors
  EXPECT_NEAR(var, 1.0, 0.015);
}

TEST(Rng, UniformIndexCoversRange) {
  std::vector<int> counts(10, 0);
  for (uint64_t i = 0; i < 100000; ++i) ++counts[uniform_index(3, 4, i, 10)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

}  // namespace
}  // namespace feast
