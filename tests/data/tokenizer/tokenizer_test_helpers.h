// What the tokenizer tests share: the Hugging Face fixtures (tests/fixtures/hf) and their
// cases.json, small file helpers, and the message of a DataError.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace feast::testing {

using Ids = std::vector<int32_t>;

inline const std::string kFixtures = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf";
inline const std::string kTokenizers = kFixtures + "/tokenizers";

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline const nlohmann::json& cases() {
  static const nlohmann::json j = nlohmann::json::parse(read_file(kTokenizers + "/cases.json"));
  return j;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the DataError `f` throws ("" if it throws none).
template <typename F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace feast::testing
