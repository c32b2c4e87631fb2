// `trainer eval CONFIG [--set ...]`: the validation loss (and perplexity) of the configured model.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "config/config.h"

namespace feast {

// Collective over `world`. Prints `val_loss=<value>` (9 significant digits) as its last line.
int eval_command(const Config& config, std::unique_ptr<Communicator> world);

}  // namespace feast
