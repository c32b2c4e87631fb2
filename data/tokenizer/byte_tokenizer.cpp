// Byte <-> token conversion; the only subtlety is reading char as unsigned so bytes >= 0x80
// (UTF-8 continuation bytes) become ids 128..255 rather than negative numbers.
#include "data/tokenizer/byte_tokenizer.h"

#include "core/error.h"

namespace feast {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= kVocabSize) {
      throw DataError("byte tokenizer: cannot decode token id " + std::to_string(tokens[i]) +
                      " (valid ids 0..255)");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

}  // namespace feast
