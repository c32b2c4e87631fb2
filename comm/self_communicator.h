// A group of one rank that needs no MPI: every collective is the identity (or a copy), so code
// written against Communicator runs unchanged in a single process (unit tests, `trainer bench`).
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace feast {

std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self");

}  // namespace feast
