// The ShardStream: tokens and masks streamed into provisional shards in a staging folder, then
// renamed or copied into out_dir's train and val shards at the cut, replacing an earlier run's.
#include "data/shard_stream.h"

#include <algorithm>
#include <cstdio>
#include <regex>
#include <system_error>

#include "core/error.h"
#include "data/dataset_meta.h"
#include "data/loss_mask.h"

namespace feast::prepare_data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string shard_name(const std::string& split, size_t index, const char* ext = ".bin") {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s_%03zu%s", split.c_str(), index, ext);
  return buf;
}

// Removes meta.json first (the directory is incomplete from here on) and any shards and masks
// of an earlier run, which the trainer's train_*.bin glob would otherwise pick up.
void clear_previous(const fs::path& dir) {
  fs::remove(dataset_meta_path(dir.string()));
  static const std::regex shard_re(R"((train|val)_\d+\.(bin|mask|docs)(\.tmp)?)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (std::regex_match(entry.path().filename().string(), shard_re)) fs::remove(entry.path());
  }
}

constexpr const char* kStagingDir = ".prepare-staging";

}  // namespace

ShardStream::ShardStream(const fs::path& dir, int64_t max_shard_tokens, int64_t vocab_size)
    : dir_(dir), staging_(dir / kStagingDir), max_(max_shard_tokens), vocab_(vocab_size),
      width_(width_for_vocab(vocab_size)) {
  std::error_code ec;
  created_dir_ = !fs::exists(dir_, ec);
  // Named here: std::filesystem's own message says neither the flag nor what would fix it.
  const auto fail = [&](const fs::path& what) {
    throw DataError("prepare-data: --out " + dir_.string() + ": cannot create " + what.string() + " (" +
                    ec.message() + "); give --out a directory that can be created and written");
  };
  fs::create_directories(dir_, ec);
  if (ec) fail(dir_);
  fs::remove_all(staging_, ec);  // left by a run that was killed
  if (!ec) fs::create_directory(staging_, ec);
  if (ec) fail(staging_);
}

ShardStream::~ShardStream() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
  if (!finished_ && created_dir_) fs::remove(dir_, ec);  // only if empty
}

void ShardStream::append(std::span<const int32_t> tokens, std::span<const uint8_t> counted) {
  FEAST_CHECK(counted.empty() || counted.size() == tokens.size(),
              counted.size() << " loss-mask entries for " << tokens.size() << " tokens");
  if (!counted.empty() && !masked_) {
    masked_ = true;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      write_loss_mask(loss_mask_path(part(k)), std::vector<uint8_t>(static_cast<size_t>(sizes_[k]), 1),
                      Durability::kByCaller);
    }
    mask_.assign(tokens_.size(), 1);
  }
  for (size_t i = 0; i < tokens.size();) {
    const size_t n = std::min(tokens.size() - i, static_cast<size_t>(max_) - tokens_.size());
    // Grows geometrically but never past one shard (max_shard_tokens may be far larger
    // than the input).
    if (tokens_.size() + n > tokens_.capacity()) {
      tokens_.reserve(std::min(static_cast<size_t>(max_),
                               std::max({tokens_.capacity() * 2, tokens_.size() + n, size_t{1} << 16})));
    }
    tokens_.insert(tokens_.end(), tokens.begin() + i, tokens.begin() + i + n);
    if (masked_) {
      for (size_t j = i; j < i + n; ++j) mask_.push_back(counted.empty() ? 1 : counted[j]);
    }
    i += n;
    if (static_cast<int64_t>(tokens_.size()) == max_) flush();
  }
}

std::pair<json, json> ShardStream::finish(int64_t n_train) {
  flush();
  const int64_t total = flushed_;  // copy() below fills tokens_ as its buffer
  clear_previous(dir_);
  finished_ = true;  // out_dir is changed from here on
  json train = {{"shards", json::array()}}, val = {{"shards", json::array()}};
  int64_t train_masked = 0, val_masked = 0;
  // Train: whole provisional shards are renamed; the one the cut falls in is cut short.
  for (size_t k = 0; static_cast<int64_t>(k) * max_ < n_train; ++k) {
    const int64_t begin = static_cast<int64_t>(k) * max_;
    const std::string name = shard_name("train", k);
    const std::string path = (dir_ / name).string();
    if (begin + sizes_[k] <= n_train) {
      fs::rename(part(k), path);
      if (masked_) fs::rename(loss_mask_path(part(k)), loss_mask_path(path));
      train_masked += zeros_[k];
    } else {
      train_masked += copy(begin, n_train - begin, path);
    }
    add(train, name);
  }
  // Val: the tail, a shard's worth at a time.
  for (int64_t begin = n_train, k = 0; begin < total; begin += max_, ++k) {
    const std::string name = shard_name("val", static_cast<size_t>(k));
    val_masked += copy(begin, std::min(max_, total - begin), (dir_ / name).string());
    add(val, name);
  }
  train["tokens"] = n_train;
  val["tokens"] = total - n_train;
  if (masked_) {
    train["masked"] = train_masked;
    val["masked"] = val_masked;
  }
  return {train, val};
}

std::string ShardStream::part(size_t k) const { return (staging_ / shard_name("part", k)).string(); }

void ShardStream::flush() {
  if (tokens_.empty()) return;
  const std::string path = part(sizes_.size());
  write_shard(path, tokens_, width_, vocab_, Durability::kByCaller);
  if (masked_) write_loss_mask(loss_mask_path(path), mask_, Durability::kByCaller);
  sizes_.push_back(static_cast<int64_t>(tokens_.size()));
  zeros_.push_back(std::count(mask_.begin(), mask_.end(), uint8_t{0}));
  flushed_ += static_cast<int64_t>(tokens_.size());
  tokens_.clear();
  mask_.clear();
}

int64_t ShardStream::copy(int64_t begin, int64_t n, const std::string& path) {
  tokens_.resize(static_cast<size_t>(n));
  mask_.resize(masked_ ? static_cast<size_t>(n) : 0);
  for (int64_t done = 0; done < n;) {
    const auto k = static_cast<size_t>((begin + done) / max_);
    const int64_t at = (begin + done) % max_;
    const int64_t m = std::min(n - done, sizes_[k] - at);
    const Shard shard(part(k));
    shard.read(at, m, tokens_.data() + done);
    if (masked_) {
      const LossMask mask(loss_mask_path(part(k)), shard);
      const std::span<const uint8_t> w = mask.window(at, m);
      std::copy(w.begin(), w.end(), mask_.begin() + done);
    }
    done += m;
  }
  write_shard(path, tokens_, width_, vocab_, Durability::kByCaller);
  if (masked_) write_loss_mask(loss_mask_path(path), mask_, Durability::kByCaller);
  return std::count(mask_.begin(), mask_.end(), uint8_t{0});
}

void ShardStream::add(json& split, const std::string& name) const {
  split["shards"].push_back(name);
  if (masked_) split["masks"].push_back(name.substr(0, name.size() - 4) + ".mask");
}

}  // namespace feast::prepare_data
