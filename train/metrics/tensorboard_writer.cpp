#include "train/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "train/metrics/tensorboard_event.h"

namespace feast {

namespace {

// CRC-32C: polynomial 0x1EDC6F41, reflected, initial value and final xor all ones.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

constexpr uint32_t kMaskDelta = 0xa282ead8u;

// TensorBoard's reader accepts any "brain.Event:" version; 2 is what TensorFlow 2 writes.
constexpr const char* kFileVersion = "brain.Event:2";

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string name(buf);
  for (char& c : name)
    if (c == '/') c = '_';  // never a path separator inside the file name
  return name;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  Crc32c crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t unmask_crc32c(uint32_t masked) {
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

double TensorBoardWriter::now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, double start_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error("cannot create the TensorBoard directory " + dir + ": " + ec.message() +
                "; check that logging.dir is writable, or set logging.tensorboard = false");

  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(std::floor(start_time)));
  const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() + seconds + "." +
                           hostname() + "." + std::to_string(static_cast<long long>(getpid()));
  // "x": create only, so two writers (or a resumed run in the same second) never share a file.
  for (int n = 0; n < 1000 && !file_; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_ && errno != EEXIST)
      throw Error("cannot create the TensorBoard event file " + path_ + ": " + std::strerror(errno) +
                  "; check that logging.dir is writable, or set logging.tensorboard = false");
  }
  if (!file_) throw Error("cannot create a new TensorBoard event file in " + dir + ": " + base + ".1 to .999 all exist");

  TensorBoardEvent event;
  event.wall_time = start_time;
  event.file_version = kFileVersion;
  write_record(encode_tensorboard_event(event));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  add_scalars(step, {{tag, value}}, wall_time);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                    double wall_time) {
  TensorBoardEvent event;
  event.wall_time = wall_time;
  event.step = step;
  event.has_summary = true;
  for (const auto& [tag, value] : values) event.scalars.emplace_back(tag, static_cast<float>(value));
  write_record(encode_tensorboard_event(event));
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0)
    throw Error(path_ + ": writing TensorBoard events failed: " + std::strerror(errno) +
                "; free disk space or set logging.tensorboard = false");
}

// TFRecord framing: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the
// data; all little-endian.
void TensorBoardWriter::write_record(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_u64(record, data.size());
  put_u32(record, mask_crc32c(crc32c(record.data(), 8)));
  record += data;
  put_u32(record, mask_crc32c(crc32c(data.data(), data.size())));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    throw Error(path_ + ": writing TensorBoard events failed: " + std::strerror(errno) +
                "; free disk space or set logging.tensorboard = false");
  flush();
}

}  // namespace feast
