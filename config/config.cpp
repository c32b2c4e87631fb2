// The Config's own derived values: where a key was set, the micro-batches a global batch makes,
// and the default checkpoint.dir.
#include "config/config.h"

#include "core/error.h"

namespace feast {

namespace {

constexpr const char* kCheckpointDirInferred = "inferred from logging.dir";

}  // namespace

int Config::micro_batches_per_rank(int dp) const {
  if (training.batch_size == 0) return parallel.num_micro_batches;
  const int64_t per_step = int64_t{dp} * parallel.micro_batch_size;
  if (training.batch_size % per_step != 0)
    throw ConfigError(where("training.batch_size") + ": training.batch_size = " + std::to_string(training.batch_size) +
                      " is not divisible by dp * parallel.micro_batch_size = " + std::to_string(dp) + " * " +
                      std::to_string(parallel.micro_batch_size) + "; choose a batch size that is a multiple of " +
                      std::to_string(per_step) + " or another micro_batch_size (" +
                      where("parallel.micro_batch_size") + ")");
  return static_cast<int>(training.batch_size / per_step);
}

std::string Config::where(const std::string& key) const {
  auto it = origin.find(key);
  return it == origin.end() ? "default" : it->second;
}

std::string default_checkpoint_dir(const std::string& logging_dir) { return logging_dir + "/checkpoints"; }

void infer_checkpoint_dir(Config& c) {
  if (c.checkpoint.dir.empty() && !c.logging.dir.empty()) {
    c.checkpoint.dir = default_checkpoint_dir(c.logging.dir);
    c.origin["checkpoint.dir"] = kCheckpointDirInferred;
  }
}

void settle_logging_dir(Config& config, const std::string& dir, const std::string& origin) {
  config.logging.dir = dir;
  config.origin["logging.dir"] = origin;
  infer_checkpoint_dir(config);
}

bool checkpoint_dir_is_default(const Config& config) { return config.where("checkpoint.dir") == kCheckpointDirInferred; }
LoraSpec lora_spec(const Config& config) {
  LoraSpec spec;
  spec.rank = config.lora.rank;
  spec.alpha = config.lora.alpha;
  spec.targets = config.lora.targets.empty() ? default_lora_targets(config.model) : config.lora.targets;
  const std::string& base = config.lora.base_dtype;
  spec.base = base == "nf4" ? BaseFormat::kNf4 : base == "bf16" ? BaseFormat::kBf16 : BaseFormat::kCompute;
  spec.double_quant = config.lora.double_quant;
  spec.dropout = float(config.lora.dropout);
  spec.seed = config.training.seed;
  return spec;
}

}  // namespace feast
