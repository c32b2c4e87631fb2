// Running cases against a backend: a row for a case that throws, and for every op left
// uncompared (see run_checks.h).
#include "backend/check/run_checks.h"

#include <exception>
#include <set>

#include "backend/check/checked_ops.h"

namespace feast::check {

void run_case(CheckHarness& h, const OpCase& c) {
  h.begin(c.op, c.shape, c.held_to);
  try {
    c.run(h);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    h.fail("threw: " + what.substr(0, what.find('\n')));
  }
}

void run_checks(Backend& tested, const CheckSettings& settings, const RowSink& sink,
                const std::vector<OpCase>& cases) {
  std::set<std::string> seen;
  CheckHarness harness(tested, settings.seed, settings.inject_error, [&](const CheckRow& row) {
    seen.insert(row.op);
    sink(row);
  });
  for (const OpCase& c : cases) run_case(harness, c);
  for (const std::string& op : checked_ops()) {
    if (seen.count(op)) continue;
    CheckRow row;
    row.op = op;
    row.dtype = dtype_label(tested.compute_dtype());
    row.ok = false;
    row.error = "never compared";
    sink(row);
  }
}

}  // namespace feast::check
