// The pre-tokenizer's regular expressions: Hugging Face's (Oniguruma) patterns compiled with
// PCRE2 in UTF + UCP mode, and iterated as Oniguruma's find_iter does. Internal to
// data/tokenizer/ (the byte-level BPE tokenizer).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace feast::bpe_detail {

// A compiled pattern in UTF + UCP mode (\p{L}, \s, \w are Unicode-aware, as in Oniguruma),
// JIT-compiled when the library supports it.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(start, end) for each non-empty match in `text`, left to right, non-overlapping.
  // `text` must be valid UTF-8 (checked once by encode, so PCRE2 does not re-check per call).
  template <typename F>
  void for_each_match(std::string_view text, F&& f) const {
    struct ThreadState {
      pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
      pcre2_match_context* context = pcre2_match_context_create(nullptr);
      pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
      ThreadState() { pcre2_jit_stack_assign(context, nullptr, stack); }
      ~ThreadState() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
      }
    };
    thread_local ThreadState state;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) throw Error("tokenizer: the pre-tokenizer regex failed: " + message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
      if (ov[1] == ov[0]) {  // an empty match: step over one character, as Oniguruma's find_iter
        pos = ov[0] + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
        continue;
      }
      f(ov[0], ov[1]);
      pos = ov[1];
    }
  }

 private:
  static std::string message(int code);
  pcre2_code* code_ = nullptr;
};

}  // namespace feast::bpe_detail
