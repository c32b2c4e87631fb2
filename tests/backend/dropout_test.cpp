// LoRA dropout's CPU ops (backend/cpu/dropout.h) and mask (backend/dropout_mask.h): the share
// dropped, the scale of what is kept, the backward through the same mask (float64 finite
// differences), and a mask that depends only on an element's place in the whole step, so a
// rank's slice of rows or columns draws the whole call's values there.
#include "backend/cpu/dropout.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/backend/gradcheck.h"

namespace feast {
namespace {

using testing::random_vector;

DropoutShape whole_call() {
  DropoutShape s;
  s.N = 40, s.C = 96, s.T = 10, s.first_sequence = 0, s.col0 = 0, s.columns = 96, s.stream = 1234, s.p = 0.25f;
  return s;
}

TEST(Dropout, DropsItsShareAndScalesWhatItKeeps) {
  const DropoutShape s = whole_call();
  const std::vector<double> x = random_vector(size_t(s.N) * s.C, 3);
  std::vector<double> y(x.size());
  cpu::dropout_forward(y.data(), x.data(), s);
  size_t dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0.0) {
      ++dropped;
    } else {
      EXPECT_DOUBLE_EQ(y[i], x[i] * double(dropout_scale(0.25f))) << i;
    }
  }
  // 3840 draws at p = 0.25: the share within 5 standard deviations (0.035).
  EXPECT_NEAR(double(dropped) / double(x.size()), 0.25, 0.035);
  DropoutShape none = s;
  none.p = 0;
  cpu::dropout_forward(y.data(), x.data(), none);
  EXPECT_EQ(y, x);
}

TEST(Dropout, BackwardGoesThroughTheSameMask) {
  DropoutShape s = whole_call();
  s.N = 6, s.C = 7, s.T = 3, s.columns = 7;
  std::vector<double> x = random_vector(size_t(s.N) * s.C, 4);
  const std::vector<double> r = random_vector(x.size(), 5);
  std::vector<double> y(x.size());
  auto loss = [&] {
    cpu::dropout_forward(y.data(), x.data(), s);
    return testing::dot(r, y.data());
  };
  std::vector<double> dx(x.size(), 0.5);  // accumulated into
  cpu::dropout_backward(dx.data(), r.data(), s);
  for (double& v : dx) v -= 0.5;
  testing::expect_gradient_matches("dropout", x, dx, loss);
}

TEST(Dropout, ASliceOfRowsOrColumnsDrawsTheWholeCallsMask) {
  const DropoutShape s = whole_call();
  const std::vector<double> x(size_t(s.N) * s.C, 1.0);
  std::vector<double> whole(x.size());
  cpu::dropout_forward(whole.data(), x.data(), s);
  // Sequences 2 and 3 of the call (rows 20..39) as a micro-batch of its own, and columns
  // [48, 96) as a row-parallel rank's slice.
  DropoutShape part = s;
  part.N = 20, part.first_sequence = 2, part.C = 48, part.col0 = 48;
  std::vector<double> y(size_t(part.N) * part.C);
  cpu::dropout_forward(y.data(), std::vector<double>(y.size(), 1.0).data(), part);
  for (int r = 0; r < part.N; ++r)
    for (int c = 0; c < part.C; ++c)
      ASSERT_EQ(y[size_t(r) * part.C + c], whole[size_t(r + 20) * s.C + size_t(c + 48)]) << r << " " << c;
  // Another stream (adapter or step) draws another mask.
  DropoutShape other = s;
  other.stream = 1235;
  std::vector<double> z(x.size());
  cpu::dropout_forward(z.data(), x.data(), other);
  EXPECT_NE(z, whole);
}

}  // namespace
}  // namespace feast
