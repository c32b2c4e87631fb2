// The byte-level tokenizer: token id = byte value, vocabulary 256. It needs no files, so the
// built-in demo and the tests run anywhere; GPT-2's BPE will sit beside it in its own file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace feast {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  static constexpr std::string_view kName = "byte";

  std::vector<int32_t> encode(std::string_view text) const;
  // Throws DataError on an id outside [0, 256): a model with a larger vocabulary sampled it.
  std::string decode(std::span<const int32_t> tokens) const;
};

}  // namespace feast
