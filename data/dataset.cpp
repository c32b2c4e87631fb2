// Resolves a split's name to shard files and opens them. Names are sorted so that the flat
// token order, and with it every sampled batch, is the same on every machine.
#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel_for.h"
#include "data/dataset_meta.h"

namespace feast {

namespace fs = std::filesystem;

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      std::error_code ec;
      if (fs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
    }
  }
  ::globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    throw DataError(pattern + ": glob failed (read error or out of memory)");
  }
  return out;
}

namespace {

const char* split_word(Split split) { return split == Split::kVal ? "val" : "train"; }

// The shards of a directory for one split (see resolve_shard_paths).
std::vector<std::string> directory_shards(const std::string& dir, Split split) {
  std::vector<std::string> all;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".bin") all.push_back(entry.path().string());
  if (split == Split::kAny) return all;
  const std::string word = split_word(split), other = split == Split::kTrain ? "val" : "train";
  // prepare-data's meta.json names each split's shards.
  if (const std::optional<DatasetMeta> meta = read_dataset_meta(dir)) {
    if (const std::optional<std::vector<std::string>> names = meta->shards(word)) {
      std::vector<std::string> listed;
      for (const std::string& name : *names) {
        const fs::path p = fs::path(dir) / name;
        if (!fs::is_regular_file(p, ec))
          throw DataError(dataset_meta_path(dir) + " lists " + word + " shard '" + name +
                          "', which is missing; rerun `trainer prepare-data`");
        listed.push_back(p.string());
      }
      return listed;
    }
  }
  // The split's word between separators ("train_000.bin", "fineweb_val_000000.bin"), not
  // inside another word ("interval", "constrained").
  const auto named = [&](const std::string& path, const std::string& w) {
    const std::regex standalone("(^|[_.-])" + w + "([_.-]|$)");
    return std::regex_search(fs::path(path).filename().string(), standalone);
  };
  std::vector<std::string> mine, not_other;
  for (const std::string& p : all) {
    if (named(p, word)) mine.push_back(p);
    if (!named(p, other)) not_other.push_back(p);
  }
  return mine.empty() ? not_other : mine;
}

}  // namespace

std::vector<std::string> resolve_shard_paths(const std::string& pattern, Split split) {
  std::vector<std::string> paths;
  std::error_code ec;
  std::string where;
  if (fs::is_directory(pattern, ec)) {
    paths = directory_shards(pattern, split);
    where = "directory '" + pattern + "' contains no " +
            (split == Split::kAny ? std::string("*.bin token shards")
                                  : std::string(split_word(split)) + " shards (*.bin named for the split, or listed "
                                                                     "in its meta.json)");
  } else if (fs::is_regular_file(pattern, ec)) {
    paths.push_back(pattern);
  } else {
    paths = glob_files(pattern);
    where = "no token shards match '" + pattern + "'";
  }
  if (paths.empty()) {
    throw DataError(where + ": run `trainer prepare-data --out DIR FILE...` (or `--synthetic`) "
                            "to create them, or fix the data path in the config");
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

namespace {

// Whether the meta.json beside `shard` (written by prepare-data) records loss masks for it.
bool meta_records_mask(const std::string& shard) {
  const std::optional<DatasetMeta> meta = read_dataset_meta(fs::path(shard).parent_path().string());
  return meta && meta->records_mask_for(fs::path(shard).filename().string());
}

}  // namespace

Dataset::Dataset(const std::string& pattern, Split split) : pattern_(pattern) {
  for (const std::string& path : resolve_shard_paths(pattern, split)) {
    shards_.emplace_back(path);
    total_tokens_ += shards_.back().size();
  }
  // The meta.json of every directory the shards are in, read now: a damaged one is an error
  // (read_dataset_meta), and set_vocab_limit compares the vocabulary it records with the model's.
  std::vector<fs::path> dirs;
  std::string packed_from;  // the first directory's meta.json, for a packing mismatch
  bool starts_recorded = false;
  for (const Shard& s : shards_) {
    const fs::path dir = fs::path(s.path()).parent_path();
    if (std::find(dirs.begin(), dirs.end(), dir) != dirs.end()) continue;
    const std::optional<DatasetMeta> meta = read_dataset_meta(dir.string());
    const std::string path = dataset_meta_path(dir.string());
    if (const std::optional<int64_t> vocab = meta ? meta->vocab_size() : std::nullopt)
      meta_vocab_.emplace_back(path, *vocab);
    if (meta && meta_path_.empty()) meta_path_ = path;
    if (meta && !eos_id_) eos_id_ = meta->eos_id();
    if (meta && meta->records_document_starts()) starts_recorded = true;
    if (meta) eos_inside_documents_ += meta->eos_inside_documents();
    const std::optional<int64_t> window = meta ? meta->packed_window() : std::nullopt;
    if (dirs.empty()) {
      packed_window_ = window;
      packed_from = meta ? path : dir.string();
    } else if (window != packed_window_) {
      auto packing = [](const std::optional<int64_t>& w) {
        return w ? "packed into windows of " + std::to_string(*w) + " tokens" : std::string("not packed");
      };
      throw DataError("'" + pattern + "' mixes shards " + packing(packed_window_) + " (" + packed_from + ") with shards " +
                      packing(window) + " (" + (meta ? path : dir.string()) +
                      "): a window would cut samples; name one kind of data, or prepare both with the same --pack");
    }
    dirs.push_back(dir);
  }
  if (packed_window_)
    for (const Shard& s : shards_)
      if (s.size() % *packed_window_ != 0)
        throw DataError(s.path() + " holds " + std::to_string(s.size()) + " tokens, not whole packed windows of " +
                        std::to_string(*packed_window_) + " (its meta.json says it was packed): the shard is "
                        "truncated or not prepare-data's; prepare the data again");
  // Packed data's document starts, beside every shard (packing is all or none, and writes them).
  if (starts_recorded) {
    starts_.reserve(shards_.size());
    for (const Shard& sh : shards_) {
      const std::string path = document_starts_path(sh.path());
      std::error_code ec;
      if (!fs::exists(path, ec))
        throw DataError(sh.path() + ": no document starts " + path + ", though its meta.json records them; re-run "
                        "`trainer prepare-data --force`");
      starts_.emplace_back(path, sh);
    }
  }
  // Masks are all or none: a split where only some shards have one would count the prompts of
  // the others in the loss, silently.
  std::vector<bool> has(shards_.size());
  size_t with = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    std::error_code ec;
    has[i] = fs::exists(loss_mask_path(shards_[i].path()), ec);
    with += has[i] ? 1 : 0;
  }
  if (with > 0 && with < shards_.size()) {
    const size_t without = size_t(std::find(has.begin(), has.end(), false) - has.begin());
    const size_t other = size_t(std::find(has.begin(), has.end(), true) - has.begin());
    throw DataError(shards_[without].path() + ": no loss mask " + loss_mask_path(shards_[without].path()) +
                    ", though " + std::to_string(with) + " of the split's " + std::to_string(shards_.size()) +
                    " shards have one (e.g. " + loss_mask_path(shards_[other].path()) +
                    "); a split has masks for every shard or for none: re-run `trainer prepare-data --force`");
  }
  if (with == 0) {
    for (const Shard& s : shards_) {
      if (meta_records_mask(s.path())) {
        throw DataError(s.path() + ": no loss mask " + loss_mask_path(s.path()) + ", though " +
                        dataset_meta_path(fs::path(s.path()).parent_path().string()) +
                        " records loss masks for it; re-run `trainer prepare-data --force`");
      }
      break;  // one shard tells: prepare-data writes masks for all of a directory or none
    }
    return;
  }
  masks_.reserve(shards_.size());
  for (const Shard& s : shards_) masks_.emplace_back(loss_mask_path(s.path()), s);
  // Masks that leave no target train at loss 0 (or evaluate nothing) and look like a run that
  // works. A shard's first token is never a target: windows do not cross shards.
  int64_t targets = 0;
  for (const LossMask& m : masks_) targets += m.counted_entries() - (m.size() > 0 ? m.counted(0, 1) : 0);
  if (targets == 0) {
    const char* nothing = split == Split::kTrain ? "nothing to learn from"
                          : split == Split::kVal ? "nothing to evaluate"
                                                 : "nothing to learn from or evaluate";
    throw DataError("every target in " + pattern_ + " is masked (its loss masks, e.g. " + masks_.front().path() +
                    ", are 0 at every target): " + nothing + "; prepare it from prompt/completion examples whose "
                    "completions are not empty, or from text (for a val split, a larger --val-fraction takes more "
                    "examples)");
  }
}

void Dataset::set_vocab_limit(int64_t limit, const std::string& what) {
  // Refused now, not at the first sampled window that reaches a large id, possibly hours in.
  for (const auto& [meta, vocab] : meta_vocab_) {
    if (limit > 0 && vocab > limit) {
      throw DataError(meta + " records vocab_size " + std::to_string(vocab) + ", larger than " + what + " " +
                      std::to_string(limit) + ": the data was prepared with a tokenizer of " + std::to_string(vocab) +
                      " ids; set " + what + " to at least " + std::to_string(vocab) +
                      ", or prepare the data again with the model's tokenizer");
    }
  }
  vocab_limit_ = limit;
  vocab_limit_from_ = what;
}

void Dataset::read(size_t shard, int64_t offset, int64_t count, int32_t* out) const {
  if (shard >= shards_.size()) {
    std::ostringstream os;
    os << pattern_ << ": shard index " << shard << " out of range (" << shards_.size()
       << " shards)";
    throw DataError(os.str());
  }
  shards_[shard].read(offset, count, out);
  if (vocab_limit_ <= 0) return;
  for (int64_t i = 0; i < count; ++i) {
    // As uint32: a uint32 shard's ids above INT32_MAX read back negative.
    if (static_cast<uint32_t>(out[i]) >= static_cast<uint64_t>(vocab_limit_)) {
      std::ostringstream os;
      os << shards_[shard].path() << ": token " << offset + i << " has id " << static_cast<uint32_t>(out[i])
         << ", outside the vocabulary of " << vocab_limit_ << " ids (" << vocab_limit_from_
         << "): the data was prepared with another tokenizer than the model's; set " << vocab_limit_from_
         << " to that tokenizer's vocabulary size or prepare the data again with the model's tokenizer "
         << "(`trainer check-data " << pattern_ << " --vocab-size " << vocab_limit_
         << "` checks every shard at once)";
      throw DataError(os.str());
    }
  }
}

DatasetScan Dataset::scan(int64_t vocab_limit, int threads) const {
  // Pieces of at most 16M tokens, so one large shard still spreads over every core.
  constexpr int64_t kPiece = int64_t{1} << 24;
  struct Piece {
    size_t shard;
    int64_t begin, end;
    TokenScan tokens;
    int64_t masked = 0;
  };
  std::vector<Piece> pieces;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const int64_t n = shards_[s].size();
    for (int64_t b = 0; b < n || b == 0; b += kPiece) pieces.push_back({s, b, std::min(n, b + kPiece), {}});
  }
  parallel_for(pieces.size(), threads, [&](size_t i) {
    Piece& p = pieces[i];
    p.tokens = shards_[p.shard].scan(p.begin, p.end, vocab_limit);
    if (masks_.empty()) return;
    // Entries other than 0 and 1 were refused when the mask was opened.
    p.masked = (p.end - p.begin) - masks_[p.shard].counted(p.begin, p.end - p.begin);
  });
  DatasetScan r;
  r.tokens = total_tokens_;
  for (const Piece& p : pieces) {
    r.max_id = std::max(r.max_id, p.tokens.max_id);
    r.masked += p.masked;
    if (r.problem || p.tokens.first_bad < 0) continue;
    std::ostringstream os;
    os << shards_[p.shard].path() << ": token " << p.tokens.first_bad << " has id " << p.tokens.first_bad_id
       << " >= the vocabulary size " << vocab_limit;
    r.problem = os.str();
  }
  return r;
}

void Dataset::check_vocab(int64_t vocab_size) const {
  for (const Shard& s : shards_) {
    const TokenScan t = s.scan(0, s.size(), vocab_size);
    if (t.first_bad >= 0) {
      std::ostringstream os;
      os << "shard " << s.path() << " contains token id " << t.first_bad_id << " >= model.vocab_size "
         << vocab_size << " (token " << t.first_bad << "): the data was prepared with a larger vocabulary "
         << "than the model's; raise model.vocab_size or re-run `trainer prepare-data`";
      throw DataError(os.str());
    }
  }
}

}  // namespace feast
