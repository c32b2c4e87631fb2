// The weights of a Hugging Face model folder, as transformers writes them: one
// model.safetensors, or shards and the model.safetensors.index.json that maps tensors to them.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "interop/hf/safetensors_file.h"

namespace feast {

// The weights of a Hugging Face model folder: model.safetensors, or (when that is absent) the
// shards model.safetensors.index.json names. Every file is opened and validated up front, and
// the index must agree with the files: each tensor where it says, none in two files, none in
// a shard it does not list.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& folder);

  const std::string& folder() const { return folder_; }
  std::vector<std::string> names() const;  // sorted
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
  const SafetensorsFile& file_of(const std::string& name) const;  // DataError when absent
  const std::vector<SafetensorsFile>& files() const { return files_; }
  void read_f32(const std::string& name, std::span<const int64_t> start,
                std::span<const int64_t> count, float* out) const;
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string folder_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> file_index_;  // tensor name -> index into files_
};

}  // namespace feast
