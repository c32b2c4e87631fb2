// The ShardStream: a token stream (and its loss masks) written to provisional shards as it is
// produced, then cut into the train and val shards once its end, and so the cut, is known.
// Files are written without a sync each (Durability::kByCaller): prepare.cpp syncs their file
// system once before meta.json. Internal to data/ (prepare.cpp and the tokenizing pipeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"

namespace feast::prepare_data {

// Where the tokenizing pipeline puts each document: straight into shards (ShardStream), or
// into memory for packing first (DocumentPacker, data/packing.h).
class DocumentSink {
 public:
  virtual ~DocumentSink() = default;
  virtual int64_t size() const = 0;  // tokens appended so far
  // Appends one document's tokens; `counted` as ShardStream::append.
  virtual void append(std::span<const int32_t> tokens, std::span<const uint8_t> counted = {}) = 0;
};

// Memory holds one shard's tokens and mask, not the corpus: tokens go into provisional shards
// of max_shard_tokens in a staging folder inside out_dir as they fill. Only when the input ends
// is the val cut known (it depends on the total and on the document starts); finish() then
// renames the provisional shards wholly before the cut to train shards, writes the one the cut
// falls in cut short, and copies the tail into val shards one shard at a time. The files are
// byte for byte those of splitting the whole token stream at the cut and writing each split in
// shards of max_shard_tokens. Until finish() clears the earlier output, a failure leaves out_dir
// as it was (the staging folder is removed).
class ShardStream final : public DocumentSink {
 public:
  ShardStream(const std::filesystem::path& dir, int64_t max_shard_tokens, int64_t vocab_size);
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;
  ~ShardStream();

  int64_t size() const override { return flushed_ + static_cast<int64_t>(tokens_.size()); }
  bool has_mask() const { return masked_; }

  // Appends one document's tokens. A non-empty `counted` (one entry per token, 1 = counts in the
  // loss) makes it an instruction example or a conversation; the first one turns masks on, every
  // token before it counting. Empty: every token counts.
  void append(std::span<const int32_t> tokens, std::span<const uint8_t> counted = {}) override;

  // Writes the final shards with the first n_train tokens as the train split and the rest as
  // val, clearing out_dir's earlier shards and meta.json first. Returns meta.json's "train"
  // and "val" objects.
  std::pair<nlohmann::json, nlohmann::json> finish(int64_t n_train);

 private:
  std::string part(size_t k) const;
  void flush();
  // Writes tokens [begin, begin + n) of the stream (at most two provisional shards) to path
  // and its mask; returns the mask's zeros.
  int64_t copy(int64_t begin, int64_t n, const std::string& path);
  void add(nlohmann::json& split, const std::string& name) const;

  std::filesystem::path dir_, staging_;
  int64_t max_, vocab_;
  TokenWidth width_;
  bool created_dir_ = false, finished_ = false, masked_ = false;
  std::vector<int32_t> tokens_;  // the shard being filled
  std::vector<uint8_t> mask_;    // its mask, while masks are on
  std::vector<int64_t> sizes_, zeros_;  // per provisional shard: tokens, mask zeros
  int64_t flushed_ = 0;
};

}  // namespace feast::prepare_data
