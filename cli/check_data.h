// `trainer check-data PATTERN ...`: reads every token and loss-mask entry of a split and says
// whether the trainer can use it, since training itself checks only the windows it reads.
#pragma once

#include <string>
#include <vector>

namespace feast {

// args: everything after the verb. Returns 0 when every shard is sound; throws feast::DataError
// naming the first bad shard and offset otherwise, and feast::Error on bad arguments.
int check_data_command(const std::vector<std::string>& args);

}  // namespace feast
