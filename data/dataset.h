// A training or validation split: the ordered list of shards named by one string (a file, a
// directory, or a glob). Owns path resolution and the startup checks on the whole split;
// windows are read shard by shard and never cross a shard boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace feast {

// Which split a name is for. A directory holds both splits when `prepare-data` (or llm.c's
// scripts) wrote it, so a directory named for one split takes only that split's shards.
enum class Split { kAny, kTrain, kVal };

// The shard files `pattern` names, sorted by name: the file itself, the matches of a POSIX glob,
// or the `*.bin` files of a directory. For a directory and a split: the shards its meta.json
// lists for that split (what `prepare-data` writes); else those whose names contain "train"
// (or "val"); else all but those named for the other split. Throws DataError naming the
// pattern (and suggesting `trainer prepare-data`) when nothing matches.
std::vector<std::string> resolve_shard_paths(const std::string& pattern, Split split = Split::kAny);

class Dataset {
 public:
  // Opens (maps and validates) every shard `pattern` resolves to for `split`.
  explicit Dataset(const std::string& pattern, Split split = Split::kAny);

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
