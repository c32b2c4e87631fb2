// The scalar formulas shared with CUDA kernels compute the same values, to the bit, compiled by
// nvcc as by the C++ compiler (see shared_math_probe.h).
#include <gtest/gtest.h>

#include <vector>

#include "tests/backend/shared_math_probe.h"

namespace feast::testing {

std::vector<double> shared_math_probe_nvcc();

namespace {

TEST(SharedMath, NvccComputesWhatTheCxxCompilerComputes) {
  const std::vector<double> cxx = shared_math_probe(), nvcc = shared_math_probe_nvcc();
  ASSERT_EQ(cxx.size(), nvcc.size());
  for (size_t i = 0; i < cxx.size(); ++i) EXPECT_EQ(nvcc[i], cxx[i]) << "value " << i;
}

}  // namespace
}  // namespace feast::testing
