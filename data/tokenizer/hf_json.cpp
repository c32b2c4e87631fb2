#include "data/tokenizer/hf_json.h"

#include <fstream>

#include "core/error.h"

namespace feast {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("tokenizer: cannot read " + path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw DataError(path + ": not valid JSON (" + e.what() + "); the tokenizer file is corrupt or truncated");
  }
}

std::optional<std::string> config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string())
    return it->at("content").get<std::string>();
  return std::nullopt;
}

}  // namespace feast
