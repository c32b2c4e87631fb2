// Loss-mask I/O, shaped like shard.cpp: header read before mapping, every mismatch
// with the token shard named with both paths. Unlike a shard's tokens, the entries are all read
// on open: at a byte per token that is cheap, and it is the only check their values get.
#include "data/loss_mask.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace feast {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

}  // namespace

namespace {

// "dir/train_000.bin" -> "dir/train_000" + extension (a name not ending in ".bin" keeps it).
std::string beside_shard(const std::string& shard_path, const std::string& extension) {
  const std::string bin = ".bin";
  if (shard_path.size() > bin.size() && shard_path.compare(shard_path.size() - bin.size(), bin.size(), bin) == 0)
    return shard_path.substr(0, shard_path.size() - bin.size()) + extension;
  return shard_path + extension;
}

}  // namespace

std::string loss_mask_path(const std::string& shard_path) { return beside_shard(shard_path, ".mask"); }

std::string document_starts_path(const std::string& shard_path) { return beside_shard(shard_path, ".docs"); }

void write_loss_mask(const std::string& path, std::span<const uint8_t> mask, Durability durability) {
  if (mask.size() > static_cast<size_t>(INT32_MAX)) {
    fail(path, "too many entries for one loss mask (" + std::to_string(mask.size()) +
                   "); the header's count is an int32");
  }
  const auto bad = std::find_if(mask.begin(), mask.end(), [](uint8_t v) { return v > 1; });
  if (bad != mask.end()) {
    fail(path, "loss-mask entry " + std::to_string(bad - mask.begin()) + " is " + std::to_string(*bad) +
                   "; entries are 0 (not counted in the loss) or 1 (counted)");
  }
  AtomicFile f(path, durability);
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kLossMaskMagic;
  header[1] = kLossMaskVersion;
  header[2] = static_cast<int32_t>(mask.size());
  f.write(header.data(), kShardHeaderBytes);
  f.write(mask.data(), mask.size());
  f.commit();
}

LossMask::LossMask(const std::string& path, const Shard& shard)
    : file_(path, "the loss mask of token shard " + shard.path(), " (re-run `trainer prepare-data`)") {
  const int64_t file_bytes = file_.size();
  std::array<int32_t, kShardHeaderInts> header{};
  if (file_bytes < kShardHeaderBytes)
    fail(path, "file is " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kShardHeaderBytes) + "-byte header: not a loss mask (of " + shard.path() + ")");
  file_.read_at(header.data(), kShardHeaderBytes, 0);  // one page, no read-ahead
  std::ostringstream problem;
  if (header[0] != kLossMaskMagic || header[1] != kLossMaskVersion) {
    problem << "header has magic " << header[0] << " and version " << header[1] << ", not a loss mask's (magic "
            << kLossMaskMagic << ", version " << kLossMaskVersion << ")";
  } else if (header[2] < 0) {
    problem << "negative entry count " << header[2] << " in the header";
  } else if (file_bytes != kShardHeaderBytes + int64_t{header[2]}) {
    problem << "header says " << header[2] << " entries (" << kShardHeaderBytes + int64_t{header[2]}
            << " bytes) but the file is " << file_bytes << " bytes";
  } else if (header[2] != shard.size()) {
    problem << "holds " << header[2] << " entries but its token shard " << shard.path() << " holds "
            << shard.size() << " tokens: the two were not written together; re-run `trainer prepare-data --force`";
  }
  if (!problem.str().empty()) {
    if (problem.str().find(shard.path()) == std::string::npos) problem << " (the loss mask of " << shard.path() << ")";
    fail(path, problem.str());
  }
  count_ = header[2];
  // Every entry is checked once, here, at a byte per token: one that is neither 0 nor 1 would
  // otherwise be taken as "counts" by the samplers without a word. One pass, read ahead.
  file_.map(MappedFile::Access::kSequential);
  const auto* entries = file_.data() + kShardHeaderBytes;
  int64_t zeros = 0;
  uint8_t any_bits = 0;
  for (int64_t i = 0; i < count_; ++i) {
    zeros += entries[i] == 0 ? 1 : 0;
    any_bits |= entries[i];
  }
  if (any_bits > 1) {
    const uint8_t* bad = std::find_if(entries, entries + count_, [](uint8_t v) { return v > 1; });
    std::ostringstream os;
    os << "entry " << bad - entries << " is " << int{*bad} << "; loss-mask entries are 0 (not counted in the loss) "
       << "or 1 (counted): the file is damaged or was not written by `trainer prepare-data`; re-run "
       << "`trainer prepare-data --force` (the loss mask of " << shard.path() << ")";
    fail(path, os.str());
  }
  counted_ = count_ - zeros;
  // Read window by window alongside the tokens from now on: random access, as for the shard
  // (shard.cpp).
  file_.advise(MappedFile::Access::kRandom);
}

std::span<const uint8_t> LossMask::window(int64_t offset, int64_t count) const {
  if (offset < 0 || count < 0 || offset + count > count_) {
    std::ostringstream os;
    os << "read of entries [" << offset << ", " << offset + count << ") is outside the mask's " << count_
       << " entries";
    fail(path(), os.str());
  }
  const auto* base = file_.data() + kShardHeaderBytes;
  return {base + offset, static_cast<size_t>(count)};
}

int64_t LossMask::counted(int64_t offset, int64_t count) const {
  const std::span<const uint8_t> w = window(offset, count);
  return count - std::count(w.begin(), w.end(), uint8_t{0});
}

}  // namespace feast
