// `trainer check-backend [--device cuda|cpu] [--dtype fp32|bf16|both] ...`: every op of a
// Backend, forward and backward, on odd shapes, on the tested backend and in the float64
// reference from identical inputs (backend/check/), compared output by output (ggml's
// test-backend-ops is the model).
#pragma once

#include <string>
#include <vector>

namespace feast {

// args: everything after the verb. Returns 0 when every comparison is within its tolerance, 1
// when one is not (or an op threw), and 2 without running anything when --device cuda has no
// CUDA device to run on. Throws ConfigError on bad arguments.
int check_backend_command(const std::vector<std::string>& args);

}  // namespace feast
