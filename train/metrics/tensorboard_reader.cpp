#include "train/metrics/tensorboard_reader.h"

#include <fstream>

#include "core/error.h"
#include "train/metrics/tensorboard_event.h"
#include "train/metrics/tensorboard_writer.h"

namespace feast {

namespace {

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

[[noreturn]] void bad_record(const std::string& path, uint64_t offset, const std::string& what) {
  throw DataError(path + ": TensorBoard record at byte offset " + std::to_string(offset) + " " + what +
                  "; the file is corrupt or cut short (a crash while writing leaves a partial last record)");
}

}  // namespace

TensorBoardEvents read_tensorboard_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open the TensorBoard event file; check the path");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  TensorBoardEvents out;
  uint64_t offset = 0;
  std::string data;
  for (;;) {
    char header[12];
    in.read(header, 12);
    if (in.gcount() == 0) break;
    if (in.gcount() != 12) bad_record(path, offset, "ends inside its 12-byte header");
    if (unmask_crc32c(static_cast<uint32_t>(get_le(header + 8, 4))) != crc32c(header, 8))
      bad_record(path, offset, "has a length whose CRC-32C does not match");
    const uint64_t length = get_le(header, 8);
    if (length > file_size - offset - 12) bad_record(path, offset, "ends inside its data");
    data.resize(length);
    char footer[4];
    in.read(data.data(), static_cast<std::streamsize>(length));
    if (static_cast<uint64_t>(in.gcount()) != length) bad_record(path, offset, "ends inside its data");
    in.read(footer, 4);
    if (in.gcount() != 4) bad_record(path, offset, "ends before its data CRC");
    if (unmask_crc32c(static_cast<uint32_t>(get_le(footer, 4))) != crc32c(data.data(), data.size()))
      bad_record(path, offset, "has data whose CRC-32C does not match");

    TensorBoardEvent event;
    try {
      event = decode_tensorboard_event(data);
    } catch (const Error& e) {
      bad_record(path, offset, std::string("does not parse as a TensorFlow Event (") + e.what() + ")");
    }
    if (out.records == 0 && !event.has_summary) out.file_version = event.file_version;
    for (const auto& [tag, value] : event.scalars) out.scalars.push_back({tag, event.step, value, event.wall_time});
    ++out.records;
    offset += 12 + length + 4;
  }
  return out;
}

std::vector<TensorBoardScalar> read_tensorboard_scalars(const std::string& path) {
  return read_tensorboard_events(path).scalars;
}

}  // namespace feast
