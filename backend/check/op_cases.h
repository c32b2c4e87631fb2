// THE table of backend op cases that tests/backend/backend_ops_test.cpp and `trainer check-backend`
// both run: each names an op, its shape and tolerance class, and runs the op on the tested backend
// and the float64 CPU templates (backend/cpu/*.h) from the same inputs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/check/checked_ops.h"
#include "backend/check/harness.h"

namespace feast::check {

struct OpCase {
  std::string op;     // an op of checked_ops()
  std::string shape;  // what it runs on, as the table prints it: "N=9 C=67"
  HeldTo held_to = HeldTo::kComputeDtype;
  // Runs the op on h.backend() and compares each output (h.begin has been called).
  std::function<void(CheckHarness& h)> run;
};

// Every case, in the order they run. The shapes are the ones that break kernels: widths that
// are not multiples of 8, one row, long rows, grouped-query heads of several sizes, a vocabulary
// range that leaves tokens out, padded logit columns, ignored targets.
const std::vector<OpCase>& op_cases();

}  // namespace feast::check
