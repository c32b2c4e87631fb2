// Reads back the TensorBoard event files of tensorboard_writer.h (or any TFRecord file of
// TensorFlow Events), checking every record's two CRCs: CI checks the writer with it, without
// Python or TensorBoard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace feast {

struct TensorBoardScalar {
  std::string tag;
  int64_t step = 0;
  double value = 0;  // the float32 that was stored, widened
  double wall_time = 0;
};

struct TensorBoardEvents {
  int64_t records = 0;
  std::string file_version;  // from the first record; empty when it holds none
  std::vector<TensorBoardScalar> scalars;  // in file order
};

// Throws feast::DataError naming the file and the byte offset of the record when a CRC does
// not match, the file ends inside a record, or a record is not an Event.
TensorBoardEvents read_tensorboard_events(const std::string& path);
std::vector<TensorBoardScalar> read_tensorboard_scalars(const std::string& path);

}  // namespace feast
