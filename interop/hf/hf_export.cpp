#include "interop/hf/hf_export.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/io/atomic_file.h"
#include "data/tokenizer/tokenizer.h"
#include "interop/hf/hf_config.h"
#include "interop/hf/safetensors_writer.h"

namespace feast {

namespace fs = std::filesystem;

namespace {

// Files of a Hugging Face tokenizer, copied as they are.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",          "tokenizer.model",   "vocab.json",
                                           "merges.txt",              "tokenizer_config.json",
                                           "special_tokens_map.json", "added_tokens.json", "chat_template.jinja"};
// Files of the source model folder that training does not change.
constexpr const char* kSourceFiles[] = {"generation_config.json"};

const char* torch_dtype(const std::string& dtype) {
  return dtype == "F32" ? "float32" : dtype == "BF16" ? "bfloat16" : "float16";
}

// Copies `name` from folder `from` into `out` (atomically), or removes an earlier export's copy
// when `from` has none. Returns whether it copied.
bool copy_or_clear(const std::string& from_folder, const std::string& out, const std::string& name) {
  const fs::path from = fs::path(from_folder) / name, to = fs::path(out) / name;
  const bool have = !from_folder.empty() && fs::exists(from);
  if (have && fs::exists(to) && fs::equivalent(from, to)) return true;  // exported into its own folder
  if (!have) {
    fs::remove(to);
    return false;
  }
  std::ifstream in(from, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw Error("cannot read " + from.string());
  write_file_atomically(to.string(), bytes);
  return true;
}

}  // namespace

HfFolderWritten write_hf_model_folder(const ModelConfig& model, const LogicalTensorSource& weights,
                                      const HfFolderOptions& options) {
  HfSpecialTokens special;
  if (!options.tokenizer.empty()) {
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(options.tokenizer);
    if (tok->vocab_size() > model.vocab_size)
      throw DataError("the tokenizer in " + options.tokenizer + " has " + std::to_string(tok->vocab_size()) +
                        " tokens, more than the model's vocab_size " + std::to_string(model.vocab_size));
    if (auto b = tok->bos_id()) special.bos_id = *b;
    if (auto e = tok->eos_id()) special.eos_id = *e;
  }
  fs::create_directories(options.out);
  HfFolderWritten written;
  const HfExport hf = export_hf_tensors(model, weights);
  const std::vector<std::string> files =
      write_safetensors_model(options.out, hf.tensors, options.max_shard_bytes, options.dtype);
  written.tensors = hf.tensors.size();
  written.weight_files = files.size() - (files.size() > 1 ? 1 : 0);  // the index is no weight file
  write_file_atomically(options.out + "/config.json", hf_config_json(model, special, torch_dtype(options.dtype)));
  for (const char* name : kTokenizerFiles)
    if (copy_or_clear(options.tokenizer, options.out, name)) written.copied.push_back(name);
  for (const char* name : kSourceFiles)
    if (copy_or_clear(options.source, options.out, name)) written.copied.push_back(name);
  return written;
}

}  // namespace feast
