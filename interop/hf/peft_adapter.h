// PEFT's LoRA adapter folders (adapter_config.json + adapter_model.safetensors, as
// peft.PeftModel.save_pretrained writes them), read into feast's adapters (model/lora.h) and
// written from them. Names: base_model.model.<the module's path in the Hugging Face model>
// .lora_A.weight (r, in) and .lora_B.weight (out, r), e.g.
// base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight (Llama family) or
// base_model.model.transformer.h.3.attn.c_attn.lora_B.weight (GPT-2, whose Conv1D layers PEFT
// adapts with the same (r, in) and (out, r) matrices as a Linear: fan_in_fan_out only changes a
// merge). feast's fused products take PEFT's separate q/k/v and gate/up adapters as blocks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/model_config.h"
#include "model/parameters.h"

namespace feast {

// PEFT's name of the A (a = true) or B matrix of `target` in `layer`.
std::string peft_tensor_name(const ModelConfig& config, int layer, const LoraTarget& target, bool a);

// Reads the adapter of `folder` into this rank's adapters (`table`, one float per element of its
// flat buffer, written at each LocalParam's offset), rank by rank slices only. Throws DataError
// naming the folder and what does not fit: a config that is not LoRA's, another rank or alpha,
// DoRA, rsLoRA, trained biases, targets other than spec's (a tensor missing, or one spec leaves
// out), a shape of another model.
void import_peft_adapter(const std::string& folder, const ModelConfig& config, const LoraSpec& spec,
                         const LocalTable& table, float* params);

// Writes `folder` (created if needed): adapter_config.json for PEFT (base_model_name_or_path =
// base, fan_in_fan_out for GPT-2's Conv1D) and adapter_model.safetensors in float32 with the
// whole logical adapter tensors `tensor` gives (by the spec of lora_param_table). Returns the
// number of tensors written.
int write_peft_adapter(const std::string& folder, const ModelConfig& config, const LoraSpec& spec,
                       const std::function<std::vector<float>(const ParamSpec&)>& tensor, const std::string& base);

}  // namespace feast
