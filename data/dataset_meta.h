// meta.json: what `trainer prepare-data` records beside the shards it writes (the parameters,
// the tokenizer, the vocabulary, each split's shards and token counts, whether loss masks go
// with them; docs/data.md lists the keys). Read and written here only. A damaged meta.json is an
// error, not "no metadata": it decides which shards a split takes, whether they have masks and
// which vocabulary they were made for, and prepare-data writes it last, so a damaged one leaves
// the directory in doubt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace feast {

inline constexpr const char* kDatasetMetaFile = "meta.json";

class DatasetMeta {
 public:
  explicit DatasetMeta(nlohmann::json json) : json_(std::move(json)) {}

  const nlohmann::json& json() const { return json_; }
  // The shard file names listed for "train" or "val"; nothing when the split is not listed.
  std::optional<std::vector<std::string>> shards(const std::string& split) const;
  // The vocabulary the shards were prepared for, when recorded.
  std::optional<int64_t> vocab_size() const;
  // Whether it records a loss mask for shard file `name`.
  bool records_mask_for(const std::string& name) const;
  // The tokenizer's end-of-text id that ends each document, when recorded (null: none).
  std::optional<int32_t> eos_id() const;
  // `prepare-data --pack`: the tokens of each packed window (training.seq_len + 1: the last
  // is a target only); every shard then holds whole windows, each starting at a multiple of it.
  std::optional<int64_t> packed_window() const;
  // Whether the shards have document starts beside them (X.docs: packed data).
  bool records_document_starts() const { return json_.value("document_starts", false); }
  // How many documents hold the end-of-text token before their end (0 when not recorded).
  int64_t eos_inside_documents() const { return json_.value("eos_inside_documents", int64_t{0}); }

 private:
  nlohmann::json json_;
};

// dir/meta.json.
std::string dataset_meta_path(const std::string& dir);
// The meta.json of `dir`: nothing when there is none; DataError naming it when it cannot be
// read, is not JSON, or is not an object.
std::optional<DatasetMeta> read_dataset_meta(const std::string& dir);
// Writes dir/meta.json atomically, last, once the shards it lists are in place.
void write_dataset_meta(const std::string& dir, const nlohmann::json& meta);

}  // namespace feast
