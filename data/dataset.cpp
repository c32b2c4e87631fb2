// Resolves a split's name to shard files and opens them. Names are sorted so that the flat
// token order, and with it every sampled batch, is the same on every machine.
#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

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

}  // namespace

std::vector<std::string> resolve_shard_paths(const std::string& pattern) {
  std::vector<std::string> paths;
  std::error_code ec;
  std::string where;
  if (fs::is_directory(pattern, ec)) {
    for (const auto& entry : fs::directory_iterator(pattern, ec)) {
      if (entry.is_regular_file(ec) && entry.path().extension() == ".bin") {
        paths.push_back(entry.path().string());
      }
    }
    where = "directory '" + pattern + "' contains no *.bin token shards";
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

Dataset::Dataset(const std::string& pattern) : pattern_(pattern) {
  for (const std::string& path : resolve_shard_paths(pattern)) {
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
