// The comparison of one output with its float64 reference (see comparison.h).
#include "backend/check/comparison.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace feast::check {

void compare_into(CheckRow& row, const std::vector<double>& test, const std::vector<double>& ref, double tolerance) {
  FEAST_CHECK(test.size() == ref.size(), "check: " << row.op << " " << row.output << ": " << test.size()
                                                   << " elements against " << ref.size() << " expected");
  double max_ref = 0, ref_squares = 0;
  for (double r : ref) {
    if (!std::isfinite(r)) continue;
    max_ref = std::max(max_ref, std::abs(r));
    ref_squares += r * r;
  }
  double worst = 0, error_squares = 0;
  size_t at = 0;
  for (size_t i = 0; i < test.size(); ++i) {
    double d = test[i] == ref[i] ? 0.0 : std::abs(test[i] - ref[i]);  // equal infinities agree
    if (!std::isfinite(d)) d = std::numeric_limits<double>::infinity();
    if (d > worst) {
      worst = d;
      at = i;
    }
    error_squares += d * d;
  }
  const double tiny = std::numeric_limits<double>::min();
  row.tolerance = tolerance;
  row.max_rel_err = worst == 0 ? 0 : worst / std::max(max_ref, tiny);
  row.nmse = error_squares == 0 ? 0 : error_squares / std::max(ref_squares, tiny);
  row.ok = row.max_rel_err <= tolerance;
  row.worst = at;
  row.test_value = test.empty() ? 0 : test[at];
  row.ref_value = ref.empty() ? 0 : ref[at];
}

}  // namespace feast::check
