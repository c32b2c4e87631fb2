// Resolves a split's name to shard files and opens them. Names are sorted so that the flat
// token order, and with it every sampled batch, is the same on every machine.
#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace feast {

namespace fs = std::filesystem;

namespace {

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
  const fs::path meta = fs::path(dir) / "meta.json";
  if (fs::is_regular_file(meta, ec)) {
    std::ifstream in(meta);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains(word) && j[word].is_object() && j[word].contains("shards") &&
        j[word]["shards"].is_array()) {
      std::vector<std::string> listed;
      for (const auto& name : j[word]["shards"]) {
        if (!name.is_string()) continue;
        const fs::path p = fs::path(dir) / name.get<std::string>();
        if (!fs::is_regular_file(p, ec))
          throw DataError(meta.string() + " lists " + word + " shard '" + name.get<std::string>() +
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

Dataset::Dataset(const std::string& pattern, Split split) : pattern_(pattern) {
  for (const std::string& path : resolve_shard_paths(pattern, split)) {
    shards_.emplace_back(path);
    total_tokens_ += shards_.back().size();
  }
}

void Dataset::read(size_t shard, int64_t offset, int64_t count, int32_t* out) const {
  if (shard >= shards_.size()) {
    std::ostringstream os;
    os << pattern_ << ": shard index " << shard << " out of range (" << shards_.size()
       << " shards)";
    throw DataError(os.str());
  }
  shards_[shard].read(offset, count, out);
}

void Dataset::check_vocab(int64_t vocab_size) const {
  for (const Shard& s : shards_) {
    const int64_t top = s.max_token();
    if (top >= vocab_size) {
      std::ostringstream os;
      os << "shard " << s.path() << " contains token id " << top << " >= model.vocab_size "
         << vocab_size << ": the data was prepared with a larger vocabulary than the model's; "
         << "raise model.vocab_size or re-run `trainer prepare-data`";
      throw DataError(os.str());
    }
  }
}

}  // namespace feast
