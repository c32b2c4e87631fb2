// The subset of TensorFlow's `Event` message that scalar logging needs, in protobuf's wire
// format, with TensorFlow's field numbers (tensorflow/core/util/event.proto, summary.proto):
//   Event { double wall_time = 1; int64 step = 2; oneof what { string file_version = 3;
//           Summary summary = 5; } }
//   Summary { repeated Value value = 1; }  Value { string tag = 1; oneof value { float simple_value = 2; } }
// Encoded here rather than by libprotobuf: Debian's libsentencepiece0 exports the protobuf-lite
// it bundles, and a process that loads both it and libprotobuf crashes while libprotobuf
// registers its descriptors (docs/observability.md). The bytes are what protobuf's serializer
// writes (a test checks a file made through libprotobuf; TensorBoard's own reader read it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace feast {

struct TensorBoardEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;  // set: a file-version event (no summary)
  std::vector<std::pair<std::string, float>> scalars;  // tag, simple_value
  bool has_summary = false;
};

std::string encode_tensorboard_event(const TensorBoardEvent& event);
// Throws feast::Error saying what is malformed; fields it does not know are skipped.
TensorBoardEvent decode_tensorboard_event(std::string_view bytes);

}  // namespace feast
