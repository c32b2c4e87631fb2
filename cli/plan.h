// `trainer plan CONFIG --gpus N ...`: every valid layout of a config on a cluster, with its
// predicted memory, communication, idle and throughput, best first.
#pragma once

#include <string>
#include <vector>

namespace feast {

int plan_command(const std::vector<std::string>& args);

}  // namespace feast
