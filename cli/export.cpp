// `trainer export`: a checkpoint to a Hugging Face model folder (config.json, safetensors weights,
// the tokenizer's files), so that `transformers` loads what feast trained. The model's shape
// comes from the config stored in the checkpoint; the weights are the optimizer's float32 master
// copies, converted to the requested dtype.
#include "cli/export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_store.h"
#include "interop/hf/hf_config.h"
#include "interop/hf/hf_weights.h"
#include "interop/hf/safetensors_model.h"
#include "interop/hf/safetensors_writer.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/log.h"
#include "data/shard.h"
#include "data/tokenizer/tokenizer.h"
#include "config/config.h"
#include "cli/cli_args.h"

namespace feast {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: trainer export CHECKPOINT --out FOLDER [--dtype float32|bfloat16|float16]\n"
    "                      [--max-shard-size SIZE] [--tokenizer FOLDER]\n"
    "Writes a Hugging Face model folder that transformers loads (AutoModelForCausalLM.from_pretrained):\n"
    "config.json, model.safetensors (or model-0000K-of-0000N.safetensors shards and\n"
    "model.safetensors.index.json above --max-shard-size) and the tokenizer's files.\n"
    "  CHECKPOINT          a checkpoint file (step_00000020.h5) or a checkpoint directory (its newest)\n"
    "  --out FOLDER        created if needed; weight files of an earlier export there are replaced\n"
    "  --dtype D           stored dtype of the weights (default float32: what feast trains in)\n"
    "  --max-shard-size S  largest weight file, e.g. 5GB, 500MB, 2GiB (default 5GB, as transformers)\n"
    "  --tokenizer FOLDER  tokenizer files to copy (default: the checkpoint's model.tokenizer, else\n"
    "                      its model.init_from); a byte-level model has none to copy\n"
    "  --config FILE       the config describing the model, for a checkpoint that stores none (one\n"
    "                      written by another tool); default: the config stored in the checkpoint\n";

// Files of a Hugging Face tokenizer, copied as they are.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",          "tokenizer.model",   "vocab.json",
                                           "merges.txt",              "tokenizer_config.json",
                                           "special_tokens_map.json", "added_tokens.json"};

std::string resolve_checkpoint(const std::string& path) {
  if (fs::is_directory(path)) {
    const std::vector<std::string> all = CheckpointStore(path).complete();
    if (all.empty()) throw ConfigError("export: " + path + " holds no complete checkpoint (step_*.h5)");
    return all.front();
  }
  if (!fs::is_regular_file(path)) throw ConfigError("export: " + path + ": no such checkpoint file or directory");
  return path;
}

}  // namespace

int export_command(const std::vector<std::string>& args) {
  std::string checkpoint, out, dtype_name = "float32", tokenizer, config_file;
  uint64_t max_shard = 5'000'000'000ULL;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw ConfigError("export: " + a + " needs a value\n" + kUsage);
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      log::info(kUsage);
      return 0;
    } else if (a == "--out") {
      out = value();
    } else if (a == "--dtype") {
      dtype_name = value();
    } else if (a == "--max-shard-size") {
      max_shard = parse_size("export: --max-shard-size", value());
    } else if (a == "--tokenizer") {
      tokenizer = value();
    } else if (a == "--config") {
      config_file = value();
    } else if (a.rfind("--", 0) == 0) {
      throw ConfigError("export: unknown option '" + a + "'\n" + kUsage);
    } else if (checkpoint.empty()) {
      checkpoint = a;
    } else {
      throw ConfigError("export: more than one checkpoint given ('" + checkpoint + "' and '" + a + "')");
    }
  }
  if (checkpoint.empty()) throw ConfigError(std::string("export: name a checkpoint\n") + kUsage);
  if (out.empty()) throw ConfigError(std::string("export: --out FOLDER is required\n") + kUsage);
  std::string dtype;
  if (dtype_name == "float32" || dtype_name == "fp32") dtype = "F32";
  else if (dtype_name == "bfloat16" || dtype_name == "bf16") dtype = "BF16";
  else if (dtype_name == "float16" || dtype_name == "fp16") dtype = "F16";
  else throw ConfigError("export: --dtype " + dtype_name + ": expected float32, bfloat16 or float16");
  const char* torch_dtype = dtype == "F32" ? "float32" : dtype == "BF16" ? "bfloat16" : "float16";

  const std::string path = resolve_checkpoint(checkpoint);
  try {
    const CheckpointMeta meta = read_checkpoint_meta(path);
    // The model comes from a config: the one stored in the file, else the one given (which must
    // fit: the reader checks every tensor's name and shape against it). A config given beside a
    // stored one is refused: what shapes no tensor (rope_theta, norm_eps) would go unchecked
    // into config.json.
    if (!meta.config.empty() && !config_file.empty())
      throw ConfigError("export: " + path + " stores its config; --config is for checkpoints that store none");
    if (meta.config.empty() && config_file.empty())
      throw ConfigError("export: " + path + " stores no config (attribute config; written by another tool?), "
                        "so the model it holds is unknown; give the config that describes it with --config FILE");
    const Config config = config_file.empty() ? parse_saved_config(meta.config, path + " (stored config)")
                                              : load_config(config_file, {});
    const ModelConfig& model = config.model;
    if (tokenizer.empty()) {
      tokenizer = tokenizer_folder(model.tokenizer, model.init_from);
      // model.tokenizer may name a tokenizer file; its folder holds the files to copy.
      if (fs::is_regular_file(tokenizer)) tokenizer = fs::path(tokenizer).parent_path().string();
      if (tokenizer == "byte") tokenizer.clear();
    } else if (!has_tokenizer_files(tokenizer)) {
      throw ConfigError("export: --tokenizer " + tokenizer + " holds no tokenizer.json, tokenizer.model or vocab.json");
    }
    HfSpecialTokens special;
    if (!tokenizer.empty()) {
      const std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer);
      if (tok->vocab_size() > model.vocab_size)
        throw ConfigError("export: the tokenizer in " + tokenizer + " has " + std::to_string(tok->vocab_size()) +
                          " tokens, more than the model's vocab_size " + std::to_string(model.vocab_size));
      if (auto b = tok->bos_id()) special.bos_id = *b;
      if (auto e = tok->eos_id()) special.eos_id = *e;
    }

    // Read and verified whole before anything is written: a checkpoint a resume would refuse
    // exports nothing, and an export into the folder the model was imported from must not
    // clobber what it still has to copy.
    const CheckpointWeights weights(path, model);
    fs::create_directories(out);
    const HfExport hf = export_hf_tensors(model, [&](const ParamSpec& spec) { return weights.tensor(spec.name); });
    const std::vector<std::string> files = write_safetensors_model(out, hf.tensors, max_shard, dtype);
    const std::string config_text = hf_config_json(model, special, torch_dtype);
    write_file_atomically(out + "/config.json", config_text);
    // The tokenizer's files: copied (each atomically) unless `out` is their folder already;
    // tokenizer files of an earlier export that this one does not have are removed, so that
    // a stale tokenizer.model cannot shadow a new tokenizer.json.
    int copied = 0;
    const bool same_folder = !tokenizer.empty() && fs::equivalent(tokenizer, out);
    for (const char* name : kTokenizerFiles) {
      const fs::path from = fs::path(tokenizer) / name, to = fs::path(out) / name;
      const bool have = !tokenizer.empty() && fs::exists(from);
      if (same_folder) {
        copied += have;
        continue;
      }
      if (!have) {
        fs::remove(to);
        continue;
      }
      std::ifstream in(from, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in && !in.eof()) throw Error("export: cannot read " + from.string());
      write_file_atomically(to.string(), bytes);
      ++copied;
    }
    std::ostringstream os;
    os << "export: " << path << " (step " << meta.step << ") -> " << out << ": config.json, " << hf.tensors.size()
       << " tensors in " << files.size() - (files.size() > 1 ? 1 : 0) << " weight file(s) as " << torch_dtype
       << ", ";
    if (copied) os << copied << " tokenizer file(s) from " << tokenizer;
    else os << "no tokenizer files (a byte-level model, or give --tokenizer)";
    log::info(os.str());
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string("export: ") + e.what());
  } catch (const DataError& e) {
    throw ConfigError(std::string("export: ") + e.what());
  } catch (const fs::filesystem_error& e) {
    throw ConfigError(std::string("export: ") + e.what());
  }
  return 0;
}

}  // namespace feast
