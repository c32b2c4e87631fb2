// A training or validation split: the ordered list of shards named by one string (a file, a
// directory, or a glob), with their loss masks when prepared with them. Owns path resolution,
// the cheap checks on opening (headers, sizes and meta.json; of the data only the loss masks, a
// byte per token: a split of hundreds of shards and tens of billions of tokens opens in seconds),
// the per-window vocabulary check, and the full scan behind `trainer check-data`. Windows never
// cross a shard boundary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/loss_mask.h"
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

// The regular files a POSIX glob matches (in glob's order; none is not an error). Throws
// DataError naming the pattern when the glob itself fails.
std::vector<std::string> glob_files(const std::string& pattern);

// What a full pass over a split found (Dataset::scan).
struct DatasetScan {
  int64_t tokens = 0;
  int64_t max_id = -1;
  int64_t masked = 0;  // loss-mask entries that are 0 (targets not counted); 0 without masks
  // The first out-of-range id in shard and offset order ("PATH: token 17 has id 300 >= the
  // vocabulary size 256"), if any. (Bad mask entries are refused when the split is opened.)
  std::optional<std::string> problem;
};

class Dataset {
 public:
  // Opens (maps and validates the headers of) every shard `pattern` resolves to for `split`,
  // and their loss masks (X.mask beside X.bin) when they have them. Masks are all or none: a
  // split where some shards have one and some do not, or whose meta.json records masks that
  // are gone, throws DataError naming the shard without its mask. Also throws DataError when a
  // mask entry is neither 0 nor 1 (naming the file and offset), when the masks leave no target
  // at all, and when a meta.json beside the shards does not parse (naming it).
  explicit Dataset(const std::string& pattern, Split split = Split::kAny);

  const std::string& pattern() const { return pattern_; }
  size_t num_shards() const { return shards_.size(); }
  const Shard& shard(size_t i) const { return shards_[i]; }
  int64_t total_tokens() const { return total_tokens_; }

  bool has_loss_mask() const { return !masks_.empty(); }
  // From the meta.json beside the shards (the first directory's that records one): the
  // end-of-text id, and the window length of packed data (`prepare-data --pack`: every shard is
  // whole windows of that many tokens). Packing is all or none across a split's directories.
  std::optional<int32_t> recorded_eos_id() const { return eos_id_; }
  // Packed data's document starts (X.docs beside every shard, as its meta.json records): where
  // each sample begins, which document masks use instead of end-of-text tokens (a chat template
  // may end every turn with one).
  bool has_document_starts() const { return !starts_.empty(); }
  // Documents whose end-of-text token also occurs inside them, as the meta.json files record.
  int64_t eos_inside_documents() const { return eos_inside_documents_; }
  const LossMask& document_starts(size_t i) const { return starts_.at(i); }
  std::optional<int64_t> packed_window() const { return packed_window_; }
  const std::string& meta_path() const { return meta_path_; }  // "" when no directory has one
  // The mask of shard i; only when has_loss_mask().
  const LossMask& loss_mask(size_t i) const { return masks_.at(i); }

  // From now on read() checks every id it copies against limit (<= 0: no check) and throws
  // DataError naming the shard, the token's offset, the id, and `what` (the setting the limit
  // comes from, e.g. "model.vocab_size"). Costs a compare per token read, instead of a scan of
  // every token at start. Throws DataError at once, naming both, when a meta.json beside the
  // shards records a vocab_size above limit: the cheap guard against data for another tokenizer.
  void set_vocab_limit(int64_t limit, const std::string& what = "the vocabulary size");
  int64_t vocab_limit() const { return vocab_limit_; }

  // Copies tokens [offset, offset + count) of shard `shard` into out; a sampler reading
  // sequences of T asks for count = T + 1. Throws DataError if the window leaves the shard, or
  // holds an id at or above the vocabulary limit.
  void read(size_t shard, int64_t offset, int64_t count, int32_t* out) const;

  // Every token and mask entry, on `threads` threads (0: all cores): the largest id, the first
  // id >= vocab_limit (<= 0: none checked), and the share of targets masked. Reads the whole
  // split: for `trainer check-data`, not for start-up.
  DatasetScan scan(int64_t vocab_limit, int threads = 0) const;

  // Throws DataError naming the first shard holding an id >= vocab_size and its offset. A full
  // scan (O(tokens)); the trainer uses set_vocab_limit instead.
  void check_vocab(int64_t vocab_size) const;

 private:
  std::string pattern_;
  std::vector<Shard> shards_;
  std::vector<LossMask> masks_;  // one per shard, or empty
  std::vector<LossMask> starts_;  // one per shard, or empty
  int64_t total_tokens_ = 0;
  int64_t vocab_limit_ = 0;
  std::string vocab_limit_from_;
  std::vector<std::pair<std::string, int64_t>> meta_vocab_;  // (meta.json path, its vocab_size)
  std::optional<int32_t> eos_id_;
  int64_t eos_inside_documents_ = 0;
  std::optional<int64_t> packed_window_;
  std::string meta_path_;
};

}  // namespace feast
