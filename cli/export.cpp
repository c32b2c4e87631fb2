// `trainer export`: a checkpoint to a Hugging Face model folder (config.json, safetensors weights,
// the tokenizer's files), so that `transformers` loads what feast trained. The model's shape
// comes from the config stored in the checkpoint; the weights are the optimizer's float32 master
// copies, converted to the requested dtype.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_store.h"
#include "cli/verb.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tokenizer/tokenizer.h"
#include "interop/hf/hf_export.h"
#include "interop/hf/model_weights.h"
#include "interop/hf/peft_adapter.h"

namespace feast {
namespace {

namespace fs = std::filesystem;

std::string resolve_checkpoint(const std::string& path) {
  if (fs::is_directory(path)) {
    const std::vector<std::string> all = CheckpointStore(path).complete();
    if (all.empty()) throw ConfigError("export: " + path + " holds no complete checkpoint (step_*.h5)");
    return all.front();
  }
  if (!fs::is_regular_file(path)) throw ConfigError("export: " + path + ": no such checkpoint file or directory");
  return path;
}

int run_export(const Args& args, const VerbContext&) {
  const std::string checkpoint = args.positional().front();
  const std::string out = args.text("--out"), config_file = args.text("--config");
  std::string tokenizer = args.text("--tokenizer");
  if (out.empty()) throw ConfigError("export: --out FOLDER is required (trainer export --help)");
  const std::string dtype_name = args.text("--dtype", "float32");
  HfFolderOptions options;
  options.out = out;
  const bool f32 = dtype_name == "float32" || dtype_name == "fp32", bf16 = dtype_name == "bfloat16" || dtype_name == "bf16";
  options.dtype = f32 ? "F32" : bf16 ? "BF16" : "F16";
  const char* torch_dtype = f32 ? "float32" : bf16 ? "bfloat16" : "float16";
  options.max_shard_bytes = uint64_t(args.number("--max-shard-size", 5e9));

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
    const LoraSpec lora = lora_spec(config);
    const bool merge = args.flag("--merge-lora");
    if (merge && !lora.enabled())
      throw ConfigError("export: --merge-lora merges LoRA adapters, but " + path +
                        " holds a whole model (lora.rank = 0): export it without --merge-lora");
    if (lora.enabled() && !merge) {
      // The adapters alone, as PEFT saves them: PeftModel.from_pretrained(base, FOLDER) loads them.
      const CheckpointWeights adapters(path, model, lora_param_table(model, lora));
      const int n = write_peft_adapter(out, model, lora, [&](const ParamSpec& s) { return adapters.tensor(s.name); },
                                       model.init_from);
      char shape[64];
      std::snprintf(shape, sizeof shape, "%d tensors, rank %d, alpha %g", n, lora.rank, lora.alpha);
      log::info("export: " + path + " (step " + std::to_string(meta.step) + ") -> " + out +
                ": a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors: " + shape + "); base model " +
                (model.init_from.empty() ? "none (initialised from the seed)" : model.init_from) +
                "; --merge-lora writes the merged model instead");
      return 0;
    }
    if (tokenizer.empty()) {
      tokenizer = tokenizer_folder(model.tokenizer, model.init_from);
      // model.tokenizer may name a tokenizer file; its folder holds the files to copy.
      if (fs::is_regular_file(tokenizer)) tokenizer = fs::path(tokenizer).parent_path().string();
      if (tokenizer == "byte") tokenizer.clear();
    } else if (!has_tokenizer_files(tokenizer)) {
      throw ConfigError("export: --tokenizer " + tokenizer + " holds no tokenizer.json, tokenizer.model or vocab.json");
    }
    options.tokenizer = tokenizer;
    options.source = model.init_from;
    // Read and verified whole before anything is written: a checkpoint a resume would refuse
    // exports nothing, and an export into the folder the model was imported from must not
    // clobber what it still has to copy.
    const ModelWeights weights(model, lora, config.training.seed, path);
    const HfFolderWritten written =
        write_hf_model_folder(model, [&](const ParamSpec& spec) { return weights.tensor(spec); }, options);
    std::ostringstream os;
    os << "export: " << path << " (step " << meta.step << ") -> " << out << ": "
       << (merge ? "the base with the LoRA adapters merged, " : "") << "config.json, " << written.tensors
       << " tensors in " << written.weight_files << " weight file(s) as " << torch_dtype << ", ";
    if (written.copied.empty()) {
      os << "no tokenizer files (a byte-level model, or give --tokenizer)";
    } else {
      os << written.copied.size() << " file(s) copied (";
      for (size_t k = 0; k < written.copied.size(); ++k) os << (k ? ", " : "") << written.copied[k];
      os << ") from " << tokenizer << (model.init_from.empty() || model.init_from == tokenizer ? "" : " and " + model.init_from);
    }
    log::info(os.str());
  } catch (const ConfigError&) {
    throw;
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string("export: ") + e.what());
  } catch (const DataError& e) {
    throw ConfigError(std::string("export: ") + e.what());
  } catch (const fs::filesystem_error& e) {
    throw ConfigError(std::string("export: ") + e.what());
  } catch (const Error& e) {
    throw ConfigError(std::string("export: ") + e.what());
  }
  return 0;
}

}  // namespace

Verb export_verb() {
  Verb v;
  v.name = "export";
  v.summary = "checkpoint -> Hugging Face model folder (config.json, safetensors, tokenizer)";
  v.single_process = true;
  CommandLine& cl = v.command_line;
  cl.verb = "export";
  cl.synopsis =
      "trainer export CHECKPOINT --out FOLDER [--dtype float32|bfloat16|float16]\n"
      "                      [--max-shard-size SIZE] [--tokenizer FOLDER] [--config FILE] [--merge-lora]";
  cl.description =
      "Writes a Hugging Face model folder that transformers loads (AutoModelForCausalLM.from_pretrained):\n"
      "config.json, model.safetensors (or model-0000K-of-0000N.safetensors shards and\n"
      "model.safetensors.index.json above --max-shard-size), the tokenizer's files, and the source\n"
      "model's generation_config.json. CHECKPOINT is a checkpoint file (step_00000020.h5) or a\n"
      "checkpoint directory (its newest).\n"
      "A LoRA checkpoint (lora.rank > 0) is written as a PEFT adapter folder (adapter_config.json,\n"
      "adapter_model.safetensors) that peft.PeftModel.from_pretrained loads on the base model;\n"
      "--merge-lora writes the base with the adapters merged as a plain model folder instead.";
  cl.positional = "a checkpoint";
  cl.min_positional = cl.max_positional = 1;
  cl.options = {
      {"--out", ValueKind::kText, "FOLDER", "created if needed; weight files of an earlier export there are replaced"},
      {"--dtype", ValueKind::kText, "D", "stored dtype of the weights (default float32: what feast trains in)",
       {"float32", "fp32", "bfloat16", "bf16", "float16", "fp16"}},
      {"--max-shard-size", ValueKind::kSize, "SIZE", "largest weight file, e.g. 5GB, 500MB, 2GiB (default 5GB, as transformers)"},
      {"--tokenizer", ValueKind::kText, "FOLDER",
       "tokenizer files to copy (default: the checkpoint's model.tokenizer, else its\n"
       "model.init_from); a byte-level model has none to copy"},
      {"--config", ValueKind::kText, "FILE",
       "the config describing the model, for a checkpoint that stores none (one written\n"
       "by another tool); default: the config stored in the checkpoint"},
      {"--merge-lora", ValueKind::kFlag, "", "a LoRA checkpoint: write the base model (model.init_from) with the\n"
       "adapters merged (W + alpha/r B A), not the adapter folder"},
  };
  v.run = run_export;
  return v;
}

}  // namespace feast
