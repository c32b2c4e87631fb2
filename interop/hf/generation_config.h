// The tokens a Hugging Face model's generation stops at: generation_config.json's eos_token_id
// (an id or a list of ids: Llama 3 Instruct stops at <|eot_id|> as well as <|end_of_text|>,
// Qwen2 chat models at <|im_end|>), else config.json's, as transformers' generate() reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace feast {

// The stop ids `folder` names: generation_config.json's eos_token_id, or config.json's when the
// former is absent or has none; empty when neither names any. Throws DataError naming the file
// when one is not JSON or its eos_token_id is neither an id, a list of ids nor null.
std::vector<int32_t> hf_stop_token_ids(const std::string& folder);

}  // namespace feast
