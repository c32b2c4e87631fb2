// load_tokenizer(): picks the tokenizer a Hugging Face model folder (or one of its files) asks
// for; the implementations live in their own files. Also the pieces they share: UTF-8
// validation and Hugging Face's added-token split, which runs before any model sees the text.
#include "data/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/byte_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"

namespace feast {

namespace fs = std::filesystem;

void check_utf8(std::string_view text, const std::string& what) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  auto fail = [&](size_t at) {
    throw DataError(what + ": invalid UTF-8 at byte offset " + std::to_string(at) +
                    " (byte 0x" + "0123456789abcdef"[s[at] >> 4] +
                    "0123456789abcdef"[s[at] & 15] + "); convert the text to UTF-8 first");
  };
  while (i < n) {
    // ASCII runs dominate real text: skip them eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      fail(i);
    }
    if (i + len > n) fail(i);
    if (s[i + 1] < lo || s[i + 1] > hi) fail(i);
    for (size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) fail(i);
    i += len;
  }
}

namespace {

// Unicode White_Space (Rust's char::is_whitespace, which HF's lstrip/rstrip use); returns the
// length of the whitespace character starting at s[i], 0 if there is none.
size_t whitespace_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20) return 1;
  if (c < 0x80) return 0;
  uint32_t cp = 0;
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  if (i + len > s.size()) return 0;
  cp = c & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  const bool ws = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
                  cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
  return ws ? len : 0;
}

size_t char_start_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// Whether a word character (PCRE2's Unicode \w: letters, digits, underscore) starts at s[i]:
// single_word tokens do not match next to one.
bool word_char_at(std::string_view s, size_t i) {
  struct Word {
    pcre2_code* code = nullptr;
    Word() {
      int err;
      PCRE2_SIZE off;
      code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>("\\w"), PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    }
  };
  static const Word word;
  thread_local pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  return pcre2_match(word.code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), i,
                     PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md, nullptr) >= 0;
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  std::erase_if(tokens_, [](const AddedToken& t) { return t.content.empty(); });
  by_first_byte_.resize(256);
  for (uint32_t k = 0; k < tokens_.size(); ++k)
    by_first_byte_[static_cast<unsigned char>(tokens_[k].content[0])].push_back(k);
  int first_bytes = 0;
  for (int b = 0; b < 256; ++b) {
    if (by_first_byte_[b].empty()) continue;
    ++first_bytes;
    only_first_byte_ = b;
  }
  if (first_bytes != 1) only_first_byte_ = -1;
  for (auto& v : by_first_byte_)
    std::stable_sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
}

void AddedTokenSplitter::split(std::string_view text, std::vector<Piece>& out) const {
  if (text.empty()) return;
  if (tokens_.empty()) {
    out.push_back({text, -1});
    return;
  }
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;           // where the search for the next match resumes
  while (pos < text.size()) {
    // Skip to the next byte that can start a token: most text has none.
    if (only_first_byte_ >= 0) {
      const void* next = std::memchr(text.data() + pos, only_first_byte_, text.size() - pos);
      if (!next) break;
      pos = static_cast<size_t>(static_cast<const char*>(next) - text.data());
    } else {
      while (pos < text.size() && by_first_byte_[static_cast<unsigned char>(text[pos])].empty()) ++pos;
      if (pos == text.size()) break;
    }
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    for (uint32_t k : candidates) {
      const std::string& c = tokens_[k].content;
      if (text.compare(pos, c.size(), c) == 0) {
        hit = &tokens_[k];
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    pos = stop;  // matches never overlap, even a discarded one (as HF's find_iter)
    if (hit->single_word) {
      const bool space_before = start == 0 || !word_char_at(text, char_start_before(text, start));
      const bool space_after = stop == text.size() || !word_char_at(text, stop);
      if (!space_before || !space_after) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > start_offset) {
        const size_t prev = char_start_before(text, s);
        if (whitespace_at(text, prev) != s - prev) break;
        s = prev;
      }
      start = s;
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        const size_t len = whitespace_at(text, stop);
        if (len == 0) break;
        stop += len;
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), hit->id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1});
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder) {
  if (folder.empty() || folder == "byte") return std::make_unique<ByteTokenizer>();
  const fs::path path(folder);
  std::error_code ec;
  auto exists = [&](const fs::path& p) { return fs::is_regular_file(p, ec); };
  auto config_in = [&](const fs::path& dir) {
    const fs::path c = dir / "tokenizer_config.json";
    return exists(c) ? c.string() : std::string();
  };
  if (exists(path)) {
    // A file of a model folder: the tokenizer it belongs to, with its folder's config.
    const std::string name = path.filename().string();
    const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    if (path.extension() == ".model")
      return std::make_unique<SentencePieceTokenizer>(path.string(), config_in(dir));
    if (name == "vocab.json" || name == "merges.txt") {
      return std::make_unique<BpeTokenizer>(BpeTokenizer::from_vocab_and_merges(
          (dir / "vocab.json").string(), (dir / "merges.txt").string(), config_in(dir)));
    }
    if (path.extension() == ".json" && name != "tokenizer_config.json")
      return std::make_unique<BpeTokenizer>(path.string(), config_in(dir));
    throw DataError("tokenizer " + folder +
                    ": not a tokenizer file; give a Hugging Face model folder or its "
                    "tokenizer.json, tokenizer.model or vocab.json");
  }
  if (!fs::is_directory(path, ec)) {
    throw DataError("tokenizer " + folder +
                    ": no such file or folder; give a Hugging Face model folder (with "
                    "tokenizer.json, tokenizer.model or vocab.json + merges.txt), one of those "
                    "files, or \"byte\"");
  }
  if (exists(path / "tokenizer.model"))
    return std::make_unique<SentencePieceTokenizer>((path / "tokenizer.model").string(), config_in(path));
  if (exists(path / "tokenizer.json"))
    return std::make_unique<BpeTokenizer>((path / "tokenizer.json").string(), config_in(path));
  if (exists(path / "vocab.json") && exists(path / "merges.txt")) {
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_vocab_and_merges(
        (path / "vocab.json").string(), (path / "merges.txt").string(), config_in(path)));
  }
  throw DataError("tokenizer folder " + folder +
                  " has no tokenizer: looked for tokenizer.model (SentencePiece), tokenizer.json "
                  "(byte-level BPE) and vocab.json + merges.txt (GPT-2 BPE)" +
                  (exists(path / "vocab.json") ? "; vocab.json is there but merges.txt is not" : "") +
                  (exists(path / "merges.txt") ? "; merges.txt is there but vocab.json is not" : ""));
}

bool has_tokenizer_files(const std::string& folder) {
  for (const char* name : {"tokenizer.model", "tokenizer.json", "vocab.json"})
    if (std::filesystem::exists(std::filesystem::path(folder) / name)) return true;
  return false;
}

std::string tokenizer_folder(const std::string& model_tokenizer, const std::string& init_from) {
  if (!model_tokenizer.empty()) return model_tokenizer;
  if (!init_from.empty() && has_tokenizer_files(init_from)) return init_from;
  return "";
}

}  // namespace feast
