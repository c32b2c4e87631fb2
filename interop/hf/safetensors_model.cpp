#include "interop/hf/safetensors_model.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace feast {

namespace fs = std::filesystem;

SafetensorsModel::SafetensorsModel(const std::string& folder) : folder_(folder) {
  const fs::path dir(folder);
  const fs::path single = dir / kSafetensorsSingleName, index = dir / kSafetensorsIndexName;
  std::error_code ec;
  if (fs::is_regular_file(single, ec)) {
    files_.emplace_back(single.string());
    for (const auto& t : files_[0].tensors()) file_index_.emplace(t.name, 0);
    return;
  }
  if (!fs::is_regular_file(index, ec)) {
    if (!fs::is_directory(dir, ec))
      throw DataError(folder + ": no such model folder; expected a Hugging Face model folder with " +
                      kSafetensorsSingleName + " or " + kSafetensorsIndexName);
    throw DataError(folder + ": found neither " + kSafetensorsSingleName + " nor " + kSafetensorsIndexName +
                    "; expected the safetensors weights of a Hugging Face model (convert .bin weights "
                    "with transformers' save_pretrained(safe_serialization=True))");
  }

  const std::string index_path = index.string();
  std::ifstream in(index, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw DataError(index_path + ": cannot read the index");
  const std::string s = text.str();
  const nlohmann::ordered_json j = parse_safetensors_json(s.data(), s.data() + s.size(), index_path, "the index");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw DataError(index_path + ": the index has no \"weight_map\" object (tensor name -> file name)" +
                    kSafetensorsCorruptHint);
  const auto& weight_map = j["weight_map"];

  std::map<std::string, std::string> wanted;  // tensor -> file, as the index says
  std::map<std::string, size_t> opened;       // file name -> index into files_
  for (const auto& [name, file] : weight_map.items()) {
    if (!file.is_string())
      throw DataError(index_path + ": tensor '" + name + "' maps to a " + file.type_name() +
                      ", not a file name" + kSafetensorsCorruptHint);
    const std::string f = file.get<std::string>();
    wanted[name] = f;
    if (opened.count(f)) continue;
    const fs::path shard = dir / f;
    if (f.empty() || fs::path(f).is_absolute() || !fs::is_regular_file(shard, ec))
      throw DataError(index_path + ": tensor '" + name + "' is in '" + f + "', which is missing from " + folder +
                      "; download every shard the index names");
    opened.emplace(f, files_.size());
    files_.emplace_back(shard.string());
  }
  // A shard may hold tensors the index leaves out (GPT-2's attention-mask buffers, say):
  // transformers loads such a folder, so they are kept and, unless asked for, never read.
  for (const auto& [f, i] : opened) {
    for (const auto& t : files_[i].tensors()) {
      const auto [it, fresh] = file_index_.emplace(t.name, i);
      if (!fresh)
        throw DataError(folder + ": tensor '" + t.name + "' is in both " + files_[it->second].path() + " and " +
                        files_[i].path() + "; the shards belong to different exports");
    }
  }
  for (const auto& [name, f] : wanted) {
    const size_t i = file_index_.count(name) ? file_index_.at(name) : files_.size();
    if (i == files_.size() || i != opened.at(f))
      throw DataError(index_path + ": puts tensor '" + name + "' in " + f + ", which does not hold it" +
                      (i == files_.size() ? std::string() : " (it is in " + files_[i].path() + ")") +
                      "; the index and the shards do not belong together");
  }
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(file_index_.size());
  for (const auto& [name, i] : file_index_) out.push_back(name);
  return out;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  const auto it = file_index_.find(name);
  return it == file_index_.end() ? nullptr : files_[it->second].find(name);
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
  const auto it = file_index_.find(name);
  if (it == file_index_.end())
    throw DataError(folder_ + ": the model has no tensor named '" + name + "'");
  return files_[it->second];
}

void SafetensorsModel::read_f32(const std::string& name, std::span<const int64_t> start,
                                std::span<const int64_t> count, float* out) const {
  file_of(name).read_f32(name, start, count, out);
}

std::vector<float> SafetensorsModel::read_f32(const std::string& name) const {
  return file_of(name).read_f32(name);
}

}  // namespace feast
