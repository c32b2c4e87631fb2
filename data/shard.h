// Token shards in llm.c's layout: a 256 x int32 header (magic, version, token count) followed
// by the tokens. Owns the byte formats, the writer and the memory-mapped reader; every other
// piece of feast reads tokens only through Shard.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/io/atomic_file.h"
#include "core/io/mapped_file.h"

namespace feast {

inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// The header formats read, by (magic, version), each fixing the token width. feast writes
// llm.c's two (dev/data/data_common.py): GPT-2's uint16 shards and, for vocabularies over
// 65,536, Llama-3's uint32 shards. It still reads its own earlier uint32 format.
struct ShardFormat {
  int32_t magic;
  int32_t version;
  int bytes_per_token;
  const char* name;
};
inline constexpr ShardFormat kShardFormats[] = {
    {20240520, 1, 2, "llm.c GPT-2 (magic 20240520, version 1, uint16 tokens)"},
    {20240801, 7, 4, "llm.c Llama-3 (magic 20240801, version 7, uint32 tokens)"},
    {20240520, 2, 4, "feast's earlier uint32 shards (magic 20240520, version 2), read only"},
};

enum class TokenWidth { u16, u32 };

// The format feast writes for a token width: llm.c's GPT-2 (uint16) or Llama-3 (uint32) layout.
inline const ShardFormat& format_for(TokenWidth w) { return w == TokenWidth::u16 ? kShardFormats[0] : kShardFormats[1]; }

// The narrowest width that holds every id of a vocabulary of vocab_size tokens.
TokenWidth width_for_vocab(int64_t vocab_size);

// Writes the shard atomically (core/io/atomic_file.h): a reader never sees half of one; on the
// disk now, or with Durability::kByCaller when the caller syncs the file system. Throws
// DataError naming the path and the token if an id is negative, does not fit width, or (when
// vocab_size > 0) is >= vocab_size: the range check of prepared data happens here.
void write_shard(const std::string& path, std::span<const int32_t> tokens, TokenWidth width,
                 int64_t vocab_size = 0, Durability durability = Durability::kNow);

// What a full pass over tokens [begin, end) of a shard found.
struct TokenScan {
  int64_t max_id = -1;          // -1 when the range is empty
  int64_t first_bad = -1;       // offset of the first id >= the limit, or -1
  int64_t first_bad_id = -1;
};

// A read-only memory map of one shard, validated on open: magic, version, and file size equal
// to header + count tokens. Any mismatch throws DataError naming the path and the problem.
// Opening reads only the header (with pread, before mapping), so opening hundreds of shards
// touches none of their token pages.
class Shard {
 public:
  explicit Shard(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const ShardFormat& format() const { return *format_; }
  TokenWidth width() const { return width_; }
  int64_t size() const { return count_; }  // tokens

  // Copies tokens [offset, offset + count) into out; throws DataError if that runs past the end.
  void read(int64_t offset, int64_t count, int32_t* out) const;
  // The largest token id, or -1 for an empty shard. O(size()).
  int64_t max_token() const;
  // One pass over tokens [begin, end): the largest id and the first id >= limit (limit <= 0:
  // no limit). Asks the kernel to read ahead, since the map is otherwise advised random.
  TokenScan scan(int64_t begin, int64_t end, int64_t limit) const;

 private:
  MappedFile file_;
  const ShardFormat* format_ = &kShardFormats[0];
  TokenWidth width_ = TokenWidth::u16;
  int64_t count_ = 0;
};

}  // namespace feast
