// A verb of the `trainer` command line run in-process, as a user would type it after
// `trainer`: through the verb table's dispatch, on a world of one process.
#pragma once

#include <string>
#include <vector>

#include "cli/verb.h"

namespace feast::testing {

inline int run_verb(const std::string& verb, std::vector<std::string> args) {
  args.insert(args.begin(), verb);
  return dispatch(args, VerbContext{});
}

}  // namespace feast::testing
