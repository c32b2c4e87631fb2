// Loss masks: beside a token shard X.bin, X.mask says per token whether predicting it counts in
// the loss (instruction data: prompt tokens do not, completion tokens and the EOS do). Owns the
// byte format, the atomic writer and the memory-mapped, validated reader.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/shard.h"

namespace feast {

// Layout, little-endian: 256 x int32 header (magic, version, token count, zeros), then one
// uint8 per token of the shard: 1 = that token, as a prediction target, counts in the loss;
// 0 = it does not.
inline constexpr int32_t kLossMaskMagic = 20240611;
inline constexpr int32_t kLossMaskVersion = 1;

// The mask file of a shard: "dir/train_000.bin" -> "dir/train_000.mask" (a name not ending in
// ".bin" gets ".mask" appended).
std::string loss_mask_path(const std::string& shard_path);
// Packed data's document starts beside a shard, in the same byte-per-token format (1 = a
// document starts at that token; `prepare-data --pack` writes them): "dir/train_000.docs".
std::string document_starts_path(const std::string& shard_path);

// Writes path.tmp, then renames it over path (as write_shard does). Throws DataError naming
// the path and the entry when an entry is neither 0 nor 1.
void write_loss_mask(const std::string& path, std::span<const uint8_t> mask,
                     Durability durability = Durability::kNow);

// A read-only map of one mask file, validated on open against its token shard: magic, version,
// file size equal to header + count, and count equal to the shard's token count. Any mismatch
// throws DataError naming both paths. Every entry is read once on open (a byte per token): one
// other than 0 or 1 throws DataError naming the file and its offset.
class LossMask {
 public:
  LossMask(const std::string& path, const Shard& shard);

  const std::string& path() const { return file_.path(); }
  int64_t size() const { return count_; }  // entries = tokens of the shard

  // Entries [offset, offset + count); throws DataError if that runs past the end.
  std::span<const uint8_t> window(int64_t offset, int64_t count) const;
  // How many of entries [offset, offset + count) are nonzero (count in the loss).
  int64_t counted(int64_t offset, int64_t count) const;
  // How many of all the entries are 1, counted on open.
  int64_t counted_entries() const { return counted_; }

 private:
  MappedFile file_;
  int64_t count_ = 0;
  int64_t counted_ = 0;
};

}  // namespace feast
