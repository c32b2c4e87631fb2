// Typed communication errors, so `main` (and tests) can tell a collective that never finished
// from any other failure. The message names the call, the group, this rank and the count.
#pragma once

#include "core/error.h"

namespace feast {

// A collective or point-to-point call did not complete before its deadline: another rank has
// probably failed or is stuck in a different call (design invariant 6: no rank waits forever).
class CommTimeout : public Error {
 public:
  using Error::Error;
};

}  // namespace feast
