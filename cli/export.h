// `trainer export CHECKPOINT --out FOLDER`: a checkpoint as a Hugging Face model folder.
#pragma once

#include <string>
#include <vector>

namespace feast {

// Returns the exit status; throws ConfigError with the usage on bad arguments and for a
// checkpoint that cannot be read (naming it).
int export_command(const std::vector<std::string>& args);

}  // namespace feast
