#include "interop/hf/generation_config.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace feast {
namespace {

using nlohmann::json;

// eos_token_id of `path` (a JSON object); empty when the file or the key is absent or null.
std::vector<int32_t> eos_ids_in(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  std::ifstream in(path);
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw DataError(path.string() + ": not a JSON object");
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  const auto id_of = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw DataError(path.string() + ": eos_token_id holds " + v.dump() + ", which is no token id");
    return v.get<int32_t>();
  };
  std::vector<int32_t> ids;
  if (it->is_array()) {
    for (const json& v : *it) ids.push_back(id_of(v));
  } else {
    ids.push_back(id_of(*it));
  }
  return ids;
}

}  // namespace

std::vector<int32_t> hf_stop_token_ids(const std::string& folder) {
  if (folder.empty()) return {};
  std::vector<int32_t> ids = eos_ids_in(std::filesystem::path(folder) / "generation_config.json");
  if (ids.empty()) ids = eos_ids_in(std::filesystem::path(folder) / "config.json");
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace feast
