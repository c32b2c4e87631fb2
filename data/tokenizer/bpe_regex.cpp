// Compiling the pre-tokenizer's patterns with PCRE2, after translating Oniguruma's Unicode
// classes (\s, \w) into what PCRE2 matches the same way.
#include "data/tokenizer/bpe_regex.h"

namespace feast::bpe_detail {

namespace {

// HF's patterns are Oniguruma's, whose Unicode \s is the White_Space property and \w is
// letters, marks, decimal digits and connector punctuation. PCRE2's UCP \s also matches U+180E
// and its \w lacks marks, so both are spelled out here; inside a class, \S and \W stay as they
// are (no pattern in use puts them there).
std::string as_oniguruma_classes(const std::string& pattern) {
  static constexpr const char* kSpace = "\\x{09}-\\x{0d}\\x{85}\\p{Z}";
  static constexpr const char* kWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 'Q') {  // \Q...\E: literal text, copied as is
        const size_t end = pattern.find("\\E", i);
        const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
        out.append(pattern, i - 1, stop - (i - 1));
        i = stop - 1;
      } else if (e == 's' || e == 'w') {
        if (!in_class) out += '[';
        out += e == 's' ? kSpace : kWord;
        if (!in_class) out += ']';
      } else if ((e == 'S' || e == 'W') && !in_class) {
        out += "[^";
        out += e == 'S' ? kSpace : kWord;
        out += ']';
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string::npos) {
        out.append(pattern, i + 1, end + 2 - (i + 1));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = literal ? pattern : as_oniguruma_classes(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code_) {
    throw DataError(where + ": cannot compile the pre-tokenizer pattern '" + pattern + "' at offset " +
                    std::to_string(offset) + ": " + message(err));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // on failure pcre2_match interprets instead
}

Regex::~Regex() { pcre2_code_free(code_); }

std::string Regex::message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace feast::bpe_detail
