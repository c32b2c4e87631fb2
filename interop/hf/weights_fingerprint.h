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

}  // namespace feast
