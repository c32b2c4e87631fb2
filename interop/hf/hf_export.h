// A Hugging Face model folder written from feast's logical tensors, as transformers'
// save_pretrained lays it out: config.json, the safetensors weights (one file or shards and an
// index), the tokenizer's files, and the files of the source model that training does not change
// (generation_config.json, chat_template.jinja).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "interop/hf/hf_weights.h"
#include "model/model_config.h"

namespace feast {

struct HfFolderOptions {
  std::string out;                  // the folder; created when needed
  std::string dtype = "F32";        // stored weights: "F32", "BF16" or "F16"
  uint64_t max_shard_bytes = 5'000'000'000ULL;  // largest weight file (0 = one file)
  std::string tokenizer;            // tokenizer files to copy: a folder, or "" for none
  std::string source;               // the model folder trained from (model.init_from), or ""
};

struct HfFolderWritten {
  size_t tensors = 0, weight_files = 0;
  std::vector<std::string> copied;  // tokenizer and source files copied, by name
};

// Writes the folder for `model`, whose logical tensors `weights` gives. Files of an earlier
// export in the folder that this one does not write (a stale tokenizer.model beside a new
// tokenizer.json, an extra shard) are removed. Throws Error or DataError naming the file.
HfFolderWritten write_hf_model_folder(const ModelConfig& model, const LogicalTensorSource& weights,
                                      const HfFolderOptions& options);

}  // namespace feast
