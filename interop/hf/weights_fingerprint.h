// A fingerprint of a Hugging Face model folder's weights: the CRC-32 of every byte of its
// safetensors files, in file order, computed in chunks on all threads. A LoRA checkpoint names its
// frozen base by it, so that a resume or an export over another base (a fine-tuned variant of
// the same shapes, say) is refused rather than silently wrong.
#pragma once

#include <string>

#include "interop/hf/safetensors_model.h"

namespace feast {

// "crc32 1a2b3c4d, 12345 bytes in 3 files".
std::string weights_fingerprint(const SafetensorsModel& model);

// "" when a LoRA checkpoint's base (CheckpointMeta::lora_base, `trained_on`) is the one given
// (`here`, the fingerprint of model.init_from = `init_from`; both empty for a base from the
// seed); else what differs, naming both.
std::string lora_base_mismatch(const std::string& trained_on, const std::string& here, const std::string& init_from);

}  // namespace feast
