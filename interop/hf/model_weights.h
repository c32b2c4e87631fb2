// The whole model a run describes, tensor by tensor, for export and generation on one process: a
// checkpoint's weights; for a LoRA checkpoint (which holds the adapters only) its frozen base
// (model.init_from's weights, or the seed's initialisation) with the adapters merged, W + (alpha
// / r) B A; without a checkpoint, model.init_from's weights or the seed's initialisation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "interop/hf/hf_weights.h"
#include "interop/hf/safetensors_model.h"
#include "model/lora.h"

namespace feast {

class ModelWeights {
 public:
  // checkpoint: a checkpoint file, verified as a resume verifies it; none = the start. A LoRA
  // checkpoint's base must be the one its adapters were trained on (CheckpointMeta::lora_base):
  // else DataError naming both. Throws CheckpointError, DataError.
  ModelWeights(const ModelConfig& model, const LoraSpec& lora, uint64_t seed,
               const std::optional<std::string>& checkpoint);
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  // The whole logical tensor of decoder_param_table(model) `spec` describes.
  std::vector<float> tensor(const ParamSpec& spec) const;

 private:
  ModelConfig model_;
  LoraSpec lora_;
  uint64_t seed_;
  std::optional<CheckpointWeights> saved_;  // the checkpoint's table: the model's, or LoRA's adapters
  std::optional<SafetensorsModel> base_;
  LogicalTensorSource base_source_;
};

}  // namespace feast
