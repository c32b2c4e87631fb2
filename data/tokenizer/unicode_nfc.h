// Unicode NFC (canonical composition) for tokenizers whose normalizer asks for it (Qwen2's
// tokenizer.json). The tables are generated from Python's unicodedata by unicode_nfc_tables.py.
#pragma once

#include <string>
#include <string_view>

namespace feast {

// NFC of `text`, which must be valid UTF-8. Text with no code point at or above U+0300 (no
// combining marks, so nothing can change) is returned as is without decoding it.
std::string nfc(std::string_view text);

}  // namespace feast
