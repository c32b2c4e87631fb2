// `trainer generate CONFIG --prompt TEXT`: continue a prompt with the configured model.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace feast {

// One process. `args` are the generate flags (the config and its --set overrides already
// parsed into `config`). Returns the exit status; throws ConfigError for bad flags.
int generate_command(const Config& config, const std::vector<std::string>& args);
// Prints the usage; 0.
int generate_help();

}  // namespace feast
