// `trainer prepare-data ...`: turns text files (or the built-in synthetic corpus) into
// train/val token shards with the byte-level tokenizer.
#pragma once

#include <string>
#include <vector>

namespace feast {

// args: everything after the verb. Returns the process exit code; throws feast::Error on bad
// input (naming the path or flag and what would fix it).
int prepare_data_command(const std::vector<std::string>& args);

}  // namespace feast
