// The byte-level tokenizer: token id = byte value, vocabulary 256. It needs no files, so the
// built-in demo and the tests run anywhere; byte-level BPE and SentencePiece sit beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace feast {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kVocabSize = 256;
  static constexpr std::string_view kName = "byte";

  std::string kind() const override { return std::string(kName); }
  int64_t vocab_size() const override { return kVocabSize; }
  // Any bytes, valid UTF-8 or not: every byte is its own token, so nothing is rejected.
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_continuation(std::string_view text) const override { return encode(text); }
  // Throws DataError on an id outside [0, 256): a model with a larger vocabulary sampled it.
  std::string decode(std::span<const int32_t> tokens) const override;
  // No special tokens: documents are simply concatenated.
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  bool is_special(int32_t) const override { return false; }
};

}  // namespace feast
