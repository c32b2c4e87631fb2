// Loss-mask I/O, shaped like shard.cpp: header read with pread before mapping, every mismatch
// with the token shard named with both paths. Unlike a shard's tokens, the entries are all read
// on open: at a byte per token that is cheap, and it is the only check their values get.
#include "data/loss_mask.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace feast {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

}  // namespace

std::string loss_mask_path(const std::string& shard_path) {
  const std::string bin = ".bin";
  if (shard_path.size() > bin.size() && shard_path.compare(shard_path.size() - bin.size(), bin.size(), bin) == 0)
    return shard_path.substr(0, shard_path.size() - bin.size()) + ".mask";
  return shard_path + ".mask";
}

void write_loss_mask(const std::string& path, std::span<const uint8_t> mask) {
  if (mask.size() > static_cast<size_t>(INT32_MAX)) {
    fail(path, "too many entries for one loss mask (" + std::to_string(mask.size()) +
                   "); the header's count is an int32");
  }
  const auto bad = std::find_if(mask.begin(), mask.end(), [](uint8_t v) { return v > 1; });
  if (bad != mask.end()) {
    fail(path, "loss-mask entry " + std::to_string(bad - mask.begin()) + " is " + std::to_string(*bad) +
                   "; entries are 0 (not counted in the loss) or 1 (counted)");
  }
  write_file_atomically(path, [&](std::ostream& f) {
    std::array<int32_t, kShardHeaderInts> header{};
    header[0] = kLossMaskMagic;
    header[1] = kLossMaskVersion;
    header[2] = static_cast<int32_t>(mask.size());
    f.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
    f.write(reinterpret_cast<const char*>(mask.data()), static_cast<std::streamsize>(mask.size()));
  });
}

LossMask::LossMask(const std::string& path, const Shard& shard) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fail(path, std::string("cannot open the loss mask of token shard ") + shard.path() + ": " +
                   std::strerror(errno) + " (re-run `trainer prepare-data`)");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file (the loss mask of " + shard.path() + ")");
  }
  const int64_t file_bytes = st.st_size;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // one page for the header, no read-ahead
  std::array<int32_t, kShardHeaderInts> header{};
  if (file_bytes < kShardHeaderBytes || ::pread(fd, header.data(), kShardHeaderBytes, 0) != kShardHeaderBytes) {
    ::close(fd);
    fail(path, "file is " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kShardHeaderBytes) + "-byte header: not a loss mask (of " + shard.path() + ")");
  }
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
    ::close(fd);
    if (problem.str().find(shard.path()) == std::string::npos) problem << " (the loss mask of " << shard.path() << ")";
    fail(path, problem.str());
  }
  count_ = header[2];
  map_bytes_ = static_cast<size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(path, std::string("mmap failed: ") + std::strerror(map_errno));
  }
  // Every entry is checked once, here, at a byte per token: one that is neither 0 nor 1 would
  // otherwise be taken as "counts" by the samplers without a word. One pass, read ahead.
  ::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
  const auto* entries = static_cast<const uint8_t*>(map_) + kShardHeaderBytes;
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
    unmap();
    fail(path, os.str());
  }
  counted_ = count_ - zeros;
  // Read window by window alongside the tokens from now on: random access, as for the shard
  // (shard.cpp).
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

LossMask::~LossMask() { unmap(); }

LossMask::LossMask(LossMask&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      count_(std::exchange(other.count_, 0)),
      counted_(std::exchange(other.counted_, 0)) {}

LossMask& LossMask::operator=(LossMask&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    count_ = std::exchange(other.count_, 0);
    counted_ = std::exchange(other.counted_, 0);
  }
  return *this;
}

void LossMask::unmap() noexcept {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

std::span<const uint8_t> LossMask::window(int64_t offset, int64_t count) const {
  if (offset < 0 || count < 0 || offset + count > count_) {
    std::ostringstream os;
    os << "read of entries [" << offset << ", " << offset + count << ") is outside the mask's " << count_
       << " entries";
    fail(path_, os.str());
  }
  const auto* base = static_cast<const uint8_t*>(map_) + kShardHeaderBytes;
  return {base + offset, static_cast<size_t>(count)};
}

int64_t LossMask::counted(int64_t offset, int64_t count) const {
  const std::span<const uint8_t> w = window(offset, count);
  return count - std::count(w.begin(), w.end(), uint8_t{0});
}

}  // namespace feast
