// TensorBoard event files: scalars written as TensorFlow `Event` records (protobuf wire format,
// see tensorboard_event.h) in TFRecord framing, so `tensorboard --logdir runs/` plots a run
// without TensorFlow. The CRC-32C helpers are shared with tensorboard_reader.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace feast {

// CRC-32C (Castagnoli) of n bytes, as TFRecord uses it: crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// TFRecord stores a CRC rotated and offset ("masked"), because a CRC of data that itself
// holds CRCs is weak: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);
uint32_t unmask_crc32c(uint32_t masked);

// One event file in `dir`: events.out.tfevents.<10-digit Unix seconds>.<hostname>.<pid>, plus
// .1, .2, ... when that name exists (a resumed run writing again in the same second), so a
// file is never overwritten. TensorBoard reads every file of a directory in name order.
// Every add_* call writes one record and flushes it, so a run that crashes keeps all it logged.
class TensorBoardWriter {
 public:
  // Seconds since the Unix epoch, the wall_time TensorBoard plots "relative" and "wall" against.
  static double now();

  // Creates `dir` (and its parents) if needed and writes the file-version record at
  // `start_time` (which also names the file; tests pass a fixed one to get fixed bytes).
  // Throws feast::Error naming the path when it cannot create or write it.
  explicit TensorBoardWriter(const std::string& dir, double start_time = now());
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar at `step`. TensorBoard stores scalars as float32, so `value` is rounded to it.
  void add_scalar(const std::string& tag, int64_t step, double value, double wall_time = now());
  // Several scalars of one step in one record (one Event holding several values).
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                   double wall_time = now());
  // Flushes the C stream to the OS; add_* already do this after every record.
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace feast
