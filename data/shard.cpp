// Shard I/O: the header check that turns a wrong file into one precise message, and the
// writer. Assumes a little-endian host, as llm.c's format does.
#include "data/shard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace feast {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host would need byte swaps");

namespace {

int64_t bytes_per_token(TokenWidth w) { return w == TokenWidth::u16 ? 2 : 4; }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

template <typename T>
void write_tokens(AtomicFile& f, const std::string& path, std::span<const int32_t> tokens,
                  int64_t max_id, int64_t vocab_size) {
  // Converted in blocks so a 100M-token shard never needs a second full copy in memory.
  std::vector<T> block;
  block.reserve(1 << 16);
  for (size_t i = 0; i < tokens.size(); i += block.capacity()) {
    block.clear();
    const size_t end = std::min(tokens.size(), i + block.capacity());
    for (size_t k = i; k < end; ++k) {
      const int32_t t = tokens[k];
      if (t < 0 || t > max_id) {
        std::ostringstream os;
        os << "token " << k << " has id " << t << ", which does not fit the shard's "
           << (sizeof(T) == 2 ? "uint16" : "uint32")
           << " tokens (valid ids 0.." << max_id << ")";
        fail(path, os.str());
      }
      if (vocab_size > 0 && t >= vocab_size) {
        std::ostringstream os;
        os << "token " << k << " has id " << t << ", outside the tokenizer's vocabulary of "
           << vocab_size << " ids: the tokenizer produced an id it does not define; nothing was written";
        fail(path, os.str());
      }
      block.push_back(static_cast<T>(t));
    }
    f.write(block.data(), block.size() * sizeof(T));
  }
}

// Asks the kernel to read tokens [begin, end) of a map now, in the background.
template <typename T>
void prefetch(const T* src, int64_t begin, int64_t end) {
  if (begin >= end) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto from = reinterpret_cast<uintptr_t>(src + begin) & ~(page - 1);
  const auto to = reinterpret_cast<uintptr_t>(src + end);
  ::madvise(reinterpret_cast<void*>(from), to - from, MADV_WILLNEED);
}

template <typename T>
TokenScan scan_tokens(const T* src, int64_t begin, int64_t end, int64_t limit) {
  TokenScan r;
  // Blocks of 1M tokens, the next one read ahead while this one is scanned: the map is advised
  // random (see the constructor), so without this a cold file would fault in page by page.
  constexpr int64_t kBlock = 1 << 20;
  prefetch(src, begin, std::min(end, begin + kBlock));
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    prefetch(src, e, std::min(end, e + kBlock));
    T top = 0;
    for (int64_t i = b; i < e; ++i) top = std::max(top, src[i]);
    r.max_id = std::max<int64_t>(r.max_id, top);
    if (limit > 0 && r.first_bad < 0 && static_cast<int64_t>(top) >= limit) {
      for (int64_t i = b; i < e; ++i) {
        if (static_cast<int64_t>(src[i]) >= limit) {
          r.first_bad = i;
          r.first_bad_id = src[i];
          break;
        }
      }
    }
  }
  return r;
}

}  // namespace

TokenWidth width_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenWidth::u16 : TokenWidth::u32;
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, TokenWidth width, int64_t vocab_size,
                 Durability durability) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    fail(path, "too many tokens for one shard (" + std::to_string(tokens.size()) +
                   "); the header's count is an int32");
  }
  AtomicFile f(path, durability);
  std::array<int32_t, kShardHeaderInts> header{};
  const ShardFormat& format = format_for(width);
  header[0] = format.magic;
  header[1] = format.version;
  header[2] = static_cast<int32_t>(tokens.size());
  f.write(header.data(), kShardHeaderBytes);
  if (width == TokenWidth::u16) {
    write_tokens<uint16_t>(f, path, tokens, 65535, vocab_size);
  } else {
    write_tokens<uint32_t>(f, path, tokens, INT32_MAX, vocab_size);
  }
  f.commit();
}

Shard::Shard(const std::string& path)
    : file_(path, "a token shard", " (run `trainer prepare-data` to create shards)") {
  const int64_t file_bytes = file_.size();
  if (file_bytes < kShardHeaderBytes)
    fail(path, "file is " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kShardHeaderBytes) + "-byte header: not a token shard");
  // The header is read before the map exists, without read-ahead (MappedFile): opening reads
  // one page per shard, however many shards a dataset has.
  std::array<int32_t, kShardHeaderInts> header{};
  file_.read_at(header.data(), kShardHeaderBytes, 0);
  std::ostringstream problem;
  format_ = nullptr;
  for (const ShardFormat& f : kShardFormats)
    if (f.magic == header[0] && f.version == header[1]) format_ = &f;
  if (!format_) {
    problem << "header has magic " << header[0] << " and version " << header[1]
            << ", which is no token shard format feast reads; it reads";
    for (size_t i = 0; i < std::size(kShardFormats); ++i) problem << (i ? ";" : "") << " " << kShardFormats[i].name;
    format_ = &kShardFormats[0];
  } else if (header[2] < 0) {
    problem << "negative token count " << header[2] << " in the header";
  } else {
    width_ = format_->bytes_per_token == 2 ? TokenWidth::u16 : TokenWidth::u32;
    count_ = header[2];
    const int64_t expected = kShardHeaderBytes + count_ * bytes_per_token(width_);
    if (file_bytes < expected) {
      problem << "truncated: header says " << count_ << " tokens (" << expected
              << " bytes) but the file is " << file_bytes << " bytes";
    } else if (file_bytes > expected) {
      problem << file_bytes - expected << " trailing bytes: header says " << count_
              << " tokens (" << expected << " bytes) but the file is " << file_bytes << " bytes";
    }
  }
  if (!problem.str().empty()) {
    count_ = 0;
    fail(path, problem.str());
  }
  // The training sampler reads windows of T + 1 tokens (a few KiB) at random offsets. The
  // default advice makes each page fault read ahead up to the device's read-ahead window
  // (128 KiB or more) around it, which on a dataset much larger than memory fills the page
  // cache with tokens no window asks for and multiplies the I/O per window; random access reads
  // only the faulting pages. Full scans (scan(), check-data) ask for read-ahead explicitly.
  file_.map(MappedFile::Access::kRandom);
}

void Shard::read(int64_t offset, int64_t count, int32_t* out) const {
  if (offset < 0 || count < 0 || offset + count > count_) {
    std::ostringstream os;
    os << "read of tokens [" << offset << ", " << offset + count << ") is outside the shard's "
       << count_ << " tokens";
    fail(path(), os.str());
  }
  const auto* base = file_.data() + kShardHeaderBytes;
  if (width_ == TokenWidth::u16) {
    const auto* src = reinterpret_cast<const uint16_t*>(base) + offset;
    for (int64_t i = 0; i < count; ++i) out[i] = src[i];
  } else {
    const auto* src = reinterpret_cast<const uint32_t*>(base) + offset;
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(src[i]);
  }
}

int64_t Shard::max_token() const { return scan(0, count_, 0).max_id; }

TokenScan Shard::scan(int64_t begin, int64_t end, int64_t limit) const {
  if (begin < 0 || begin > end || end > count_) {
    std::ostringstream os;
    os << "scan of tokens [" << begin << ", " << end << ") is outside the shard's " << count_ << " tokens";
    fail(path(), os.str());
  }
  const auto* base = file_.data() + kShardHeaderBytes;
  if (width_ == TokenWidth::u16) return scan_tokens(reinterpret_cast<const uint16_t*>(base), begin, end, limit);
  return scan_tokens(reinterpret_cast<const uint32_t*>(base), begin, end, limit);
}

}  // namespace feast
