// GPT-2's bytes_to_unicode table and the conversions of vocabulary tokens between its printable
// alphabet and the raw bytes they stand for.
#include "data/tokenizer/byte_alphabet.h"

namespace feast::bpe_detail {

ByteAlphabet::ByteAlphabet() {
  byte_of.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    code_point[b] = printable ? b : 256 + extra++;
    const uint32_t cp = code_point[b];
    utf8[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                        : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    byte_of[cp] = static_cast<int16_t>(b);
  }
}

std::optional<std::string> ByteAlphabet::to_bytes(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_of[cp]));
  }
  return out;
}

std::string ByteAlphabet::to_unicode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) out += utf8[static_cast<unsigned char>(b)];
  return out;
}

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace feast::bpe_detail
