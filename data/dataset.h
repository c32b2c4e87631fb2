// A training or validation split: the ordered list of shards named by one string (a file, a
// directory, or a glob). Owns path resolution and the startup checks on the whole split;
// windows are read shard by shard and never cross a shard boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace feast {

// The shard files `pattern` names, sorted by name: the file itself, every `*.bin` in a
// directory, or the matches of a POSIX glob. Throws DataError naming the pattern (and
// suggesting `trainer prepare-data`) when nothing matches.
std::vector<std::string> resolve_shard_paths(const std::string& pattern);

class Dataset {
 public:
  // Opens (maps and validates) every shard `pattern` resolves to.
  explicit Dataset(const std::string& pattern);

  const std::string& pattern() const { return pattern_; }
  size_t num_shards() const { return shards_.size(); }
  const Shard& shard(size_t i) const { return shards_[i]; }
  int64_t total_tokens() const { return total_tokens_; }

  // Copies tokens [offset, offset + count) of shard `shard` into out; a sampler reading
  // sequences of T asks for count = T + 1. Throws DataError if the window leaves the shard.
  void read(size_t shard, int64_t offset, int64_t count, int32_t* out) const;

  // Throws DataError naming the first shard holding an id >= vocab_size: data prepared with a
  // different tokenizer than the model's. One pass over every token.
  void check_vocab(int64_t vocab_size) const;

 private:
  std::string pattern_;
  std::vector<Shard> shards_;
  int64_t total_tokens_ = 0;
};

}  // namespace feast
