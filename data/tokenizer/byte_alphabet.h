// GPT-2's bytes_to_unicode: each byte stands for one printable code point, so that byte-level
// BPE vocabularies are text. Internal to data/tokenizer/ (the byte-level BPE tokenizer).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace feast::bpe_detail {

struct ByteAlphabet {
  std::array<uint32_t, 256> code_point{};      // byte -> code point
  std::array<std::string, 256> utf8;           // byte -> its code point in UTF-8
  std::array<int16_t, 512> byte_of{};          // code point -> byte, -1 when none

  ByteAlphabet();

  // The raw bytes a vocabulary token (in the mapped alphabet) stands for; nullopt when it holds
  // a character outside the alphabet (an added token such as "<|endoftext|>" is all inside).
  std::optional<std::string> to_bytes(std::string_view token) const;

  std::string to_unicode(std::string_view bytes) const;
};

// The one alphabet, built on first use.
const ByteAlphabet& alphabet();

}  // namespace feast::bpe_detail
