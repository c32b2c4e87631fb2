#include "data/dataset_meta.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace feast {

namespace fs = std::filesystem;

std::string dataset_meta_path(const std::string& dir) { return (fs::path(dir) / kDatasetMetaFile).string(); }

std::optional<DatasetMeta> read_dataset_meta(const std::string& dir) {
  const std::string path = dataset_meta_path(dir);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  const std::string fix = ": it is written by `trainer prepare-data` beside the shards; re-run that with --force "
                          "to write it again, or remove it if the shards came from elsewhere";
  std::ifstream in(path);
  if (!in) throw DataError(path + ": cannot read: " + std::strerror(errno) + fix);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string what = e.what();
    const auto at = what.find("parse error");  // drop nlohmann's "[json.exception.parse_error.101] "
    throw DataError(path + ": not valid JSON (" + (at == std::string::npos ? what : what.substr(at)) + ")" + fix);
  }
  if (!j.is_object()) throw DataError(path + ": a JSON " + j.type_name() + ", not an object" + fix);
  return DatasetMeta(std::move(j));
}

void write_dataset_meta(const std::string& dir, const nlohmann::json& meta) {
  write_file_atomically(dataset_meta_path(dir), meta.dump(2) + "\n");
}

std::optional<std::vector<std::string>> DatasetMeta::shards(const std::string& split) const {
  if (!json_.contains(split) || !json_[split].is_object() || !json_[split].contains("shards") ||
      !json_[split]["shards"].is_array())
    return std::nullopt;
  std::vector<std::string> names;
  for (const auto& name : json_[split]["shards"])
    if (name.is_string()) names.push_back(name.get<std::string>());
  return names;
}

std::optional<int64_t> DatasetMeta::vocab_size() const {
  if (!json_.contains("vocab_size") || !json_["vocab_size"].is_number_integer()) return std::nullopt;
  return json_["vocab_size"].get<int64_t>();
}

std::optional<int32_t> DatasetMeta::eos_id() const {
  if (!json_.contains("eos_id") || !json_["eos_id"].is_number_integer()) return std::nullopt;
  return json_["eos_id"].get<int32_t>();
}

std::optional<int64_t> DatasetMeta::packed_window() const {
  if (!json_.contains("packing") || !json_["packing"].is_object() || !json_["packing"].contains("window") ||
      !json_["packing"]["window"].is_number_integer())
    return std::nullopt;
  return json_["packing"]["window"].get<int64_t>();
}

bool DatasetMeta::records_mask_for(const std::string& name) const {
  if (!json_.contains("loss_mask") || json_["loss_mask"] != true) return false;
  for (const char* split : {"train", "val"})
    if (const auto names = shards(split))
      for (const std::string& n : *names)
        if (n == name) return true;
  return false;
}

}  // namespace feast
