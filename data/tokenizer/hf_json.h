// Reading the JSON files of a Hugging Face tokenizer folder, shared by the tokenizers that load
// them and the chat template: a file parsed whole, and a special token as tokenizer_config.json
// writes it.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace feast {

// The JSON of `path`. Throws DataError naming the path when it cannot be read or parsed.
nlohmann::json read_json(const std::string& path);

// tokenizer_config.json's special token `key` (eos_token, bos_token, unk_token, pad_token): a
// string, or an AddedToken object's "content"; nullopt when absent, null or neither.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key);

}  // namespace feast
