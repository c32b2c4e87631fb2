#include "interop/hf/model_weights.h"

#include "core/error.h"
#include "model/architecture.h"
#include "interop/hf/weights_fingerprint.h"

namespace feast {

ModelWeights::ModelWeights(const ModelConfig& model, const LoraSpec& lora, uint64_t seed,
                           const std::optional<std::string>& checkpoint)
    : model_(model), lora_(lora), seed_(seed) {
  const bool lora_checkpoint = checkpoint && lora.enabled();
  if (checkpoint) saved_.emplace(*checkpoint, model, lora_checkpoint ? lora_param_table(model, lora) : decoder_param_table(model));
  if (checkpoint && !lora_checkpoint) return;
  if (!model.init_from.empty()) {
    base_.emplace(model.init_from);
    base_source_ = hf_logical_tensors(*base_, model);
  } else {
    base_source_ = [this](const ParamSpec& spec) {
      std::vector<float> v(spec.numel);
      for (size_t i = 0; i < spec.numel; ++i) v[i] = initial_value(spec, seed_, int64_t(i));
      return v;
    };
  }
  if (!lora_checkpoint) return;
  const std::string mismatch = lora_base_mismatch(read_checkpoint_meta(*checkpoint).lora_base,
                                                  base_ ? weights_fingerprint(*base_) : "", model.init_from);
  if (!mismatch.empty())
    throw DataError(*checkpoint + ": " + mismatch + "; point model.init_from at the model the adapters were trained on");
}

std::vector<float> ModelWeights::tensor(const ParamSpec& spec) const {
  if (saved_ && !lora_.enabled()) return saved_->tensor(spec.name);
  std::vector<float> values = base_source_(spec);
  if (saved_) merge_lora(model_, lora_, spec, values, [this](const std::string& name) { return saved_->tensor(name); });
  return values;
}

}  // namespace feast
