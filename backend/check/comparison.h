// One compared output as a row of the check's table, and the comparison itself: the largest
// |test - ref| relative to the largest |ref| of the tensor, the NMSE, and the worst element.
// Pure arithmetic on host vectors; the harness (harness.h) fills in what was compared.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace feast::check {

// One compared output, or an op that could not be compared (`error`: "threw: ...", "never
// compared"), which always fails.
struct CheckRow {
  std::string op, output, shape, dtype;
  double max_rel_err = 0, nmse = 0, tolerance = 0;
  bool ok = true;
  size_t worst = 0;  // the element of the largest error
  double test_value = 0, ref_value = 0;
  std::string error;
};

// Where rows go as they are made (a table printed as it grows, a test's list).
using RowSink = std::function<void(const CheckRow&)>;

// Fills row's errors, worst element and ok from test against ref (same size, else throws
// feast::Error). Non-finite reference values are left out of max |ref|; a NaN or an infinity in
// test where ref differs is an infinite error, so it never passes.
void compare_into(CheckRow& row, const std::vector<double>& test, const std::vector<double>& ref, double tolerance);

}  // namespace feast::check
