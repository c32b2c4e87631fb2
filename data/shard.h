// Token shards in llm.c's layout: a 256 x int32 header (magic, version, token count) followed
// by the tokens. Owns the byte format, the atomic writer and the memory-mapped reader; every
// other piece of feast reads tokens only through Shard.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace feast {

inline constexpr int32_t kShardMagic = 20240520;  // llm.c's magic
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// The header's version field doubles as the token width. Version 1 (uint16) is llm.c's format,
// byte for byte; version 2 (uint32) is feast's own, for vocabularies over 65,536.
enum class TokenWidth : int32_t { u16 = 1, u32 = 2 };

// The narrowest width that holds every id of a vocabulary of vocab_size tokens.
TokenWidth width_for_vocab(int64_t vocab_size);

// Writes path.tmp, then renames it over path, so a reader never sees a half-written shard.
// Throws DataError naming the path and the token if an id is negative or does not fit width.
void write_shard(const std::string& path, std::span<const int32_t> tokens, TokenWidth width);

// A read-only memory map of one shard, validated on open: magic, version, and file size equal
// to header + count tokens. Any mismatch throws DataError naming the path and the problem.
class Shard {
 public:
  explicit Shard(const std::string& path);
  ~Shard();
  Shard(Shard&& other) noexcept;
  Shard& operator=(Shard&& other) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  const std::string& path() const { return path_; }
  int32_t version() const { return static_cast<int32_t>(width_); }
  int64_t size() const { return count_; }  // tokens

  // Copies tokens [offset, offset + count) into out; throws DataError if that runs past the end.
  void read(int64_t offset, int64_t count, int32_t* out) const;
  // The largest token id, or -1 for an empty shard. O(size()).
  int64_t max_token() const;

 private:
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  TokenWidth width_ = TokenWidth::u16;
  int64_t count_ = 0;
};

}  // namespace feast
