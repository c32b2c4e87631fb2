// `trainer inspect CHECKPOINT.h5`: what a checkpoint holds (step, tokens, seed, the layout it
// was saved with, every tensor with its shape and whether its checksum holds) and the config
// it was saved with. Exits 1 when any dataset fails its checksum or cannot be read.
#pragma once

#include <string>
#include <vector>

namespace feast {

int inspect_command(const std::vector<std::string>& args);

}  // namespace feast
