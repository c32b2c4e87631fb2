// Running the table against a backend: every case in turn, its rows reported as they are made,
// a case that throws failing with its message, and every op of checked_ops() that no row names
// failing as "never compared". `trainer check-backend` prints these rows; the tests assert them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/check/comparison.h"
#include "backend/check/harness.h"
#include "backend/check/op_cases.h"

namespace feast::check {

// Runs one case: its rows, or after those it made, one failing row "threw: <first line of the
// message>" when it throws (an operand check, a device error); its other outputs go uncompared.
void run_case(CheckHarness& h, const OpCase& c);

struct CheckSettings {
  uint64_t seed = 1;
  std::string inject_error;  // an op whose first compared output is perturbed on the tested side, or ""
};

// Every case of `cases` against `tested` (in its compute dtype), then a "never compared" row for
// each op of checked_ops() that none of their rows names.
void run_checks(Backend& tested, const CheckSettings& settings, const RowSink& sink,
                const std::vector<OpCase>& cases = op_cases());

}  // namespace feast::check
