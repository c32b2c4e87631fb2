// Byte-level BPE, following Hugging Face's `tokenizers` step for step so ids match it exactly:
// AddedVocabulary's split (raw text, then normalized text), the normalizer (none or NFC), the
// pre-tokenizers (ByteLevel, Split, Digits, Sequence of them), and BPE's merge loop (lowest rank first, leftmost on ties). Pieces stay raw
// bytes throughout: the vocabulary is converted from GPT-2's printable alphabet back to bytes
// once at load, so encoding never builds the mapped strings.
#include "data/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>
#include <pcre2.h>

#include "core/error.h"
#include "data/tokenizer/unicode_nfc.h"

namespace feast {

using nlohmann::json;

namespace {

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// ---- GPT-2's bytes_to_unicode: each byte is one printable code point ----------------------

struct ByteAlphabet {
  std::array<uint32_t, 256> code_point{};      // byte -> code point
  std::array<std::string, 256> utf8;           // byte -> its code point in UTF-8
  std::array<int16_t, 512> byte_of{};          // code point -> byte, -1 when none

  ByteAlphabet() {
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

  // The raw bytes a vocabulary token (in the mapped alphabet) stands for; nullopt when it holds
  // a character outside the alphabet (an added token such as "<|endoftext|>" is all inside).
  std::optional<std::string> to_bytes(std::string_view token) const {
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

  std::string to_unicode(std::string_view bytes) const {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char b : bytes) out += utf8[static_cast<unsigned char>(b)];
    return out;
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// ---- PCRE2 ----------------------------------------------------------------------------------

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

// A compiled pattern in UTF + UCP mode (\p{L}, \s, \w are Unicode-aware, as in Oniguruma),
// JIT-compiled when the library supports it.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& where) {
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
  ~Regex() { pcre2_code_free(code_); }
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
  static std::string message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    return reinterpret_cast<const char*>(buf);
  }
  pcre2_code* code_ = nullptr;
};

// ---- JSON helpers ---------------------------------------------------------------------------

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("tokenizer: cannot read " + path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw DataError(path + ": not valid JSON (" + e.what() + "); the tokenizer file is corrupt or truncated");
  }
}

bool flag(const json& obj, const char* key, bool fallback = false) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? fallback : it->get<bool>();
}

// tokenizer_config.json's eos_token / bos_token: a string or {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

AddedToken added_token_from(const json& t, int32_t id) {
  AddedToken a;
  a.id = id;
  a.content = t.at("content").get<std::string>();
  a.special = flag(t, "special");
  a.lstrip = flag(t, "lstrip");
  a.rstrip = flag(t, "rstrip");
  a.single_word = flag(t, "single_word");
  // HF's default: special tokens match the raw text, other added tokens the normalized text.
  a.normalized = flag(t, "normalized", !a.special);
  return a;
}

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kByteLevel, kSplit } kind = Kind::kByteLevel;
  bool add_prefix_space = false;           // ByteLevel
  std::shared_ptr<const Regex> regex;      // ByteLevel with use_regex, or Split
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

struct Merge {
  int32_t rank;
  int32_t id;  // the merged token
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace

struct BpeTokenizer::Impl {
  std::string path;  // what error messages name
  StringMap vocab;                                  // raw bytes -> id (byte-representable tokens)
  std::vector<std::string> token_bytes;             // id -> bytes it decodes to
  std::array<int32_t, 256> byte_id{};               // a single byte's token; -1: HF drops it
  std::unordered_map<uint64_t, Merge> merges;       // (left id, right id) -> merge
  bool ignore_merges = false;
  bool nfc = false;  // the normalizer: NFC or nothing
  std::vector<PreTokenizerStep> steps;
  AddedTokenSplitter raw_split, normalized_split;
  int64_t size = 0;
  std::optional<int32_t> eos, bos;

  // Words seen before: real text repeats a small set of words, so most pieces are a lookup.
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr size_t kMaxCacheEntries = 1 << 20;
  static constexpr size_t kMaxCachedPiece = 256;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void pre_tokenize(std::string_view piece, size_t step, bool mapped, std::vector<int32_t>& out) const;
  void apply_split(const PreTokenizerStep& s, std::string_view piece, size_t step, bool mapped,
                   std::vector<int32_t>& out) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  // Setup shared by both file formats.
  void set_vocab(const json& vocab_json, const std::string& where);
  void add_merge(const std::string& left, const std::string& right, int32_t rank, const std::string& where);
  void set_added_tokens(const std::vector<AddedToken>& tokens);
  // `gpt2_defaults`: GPT2Tokenizer's, <|endoftext|> for bos and eos unless the config has the key
  // (a null value there means none).
  void set_special_ids(const std::string& config_json, const StringMap& by_content, bool gpt2_defaults = false);
};

// ---- Loading --------------------------------------------------------------------------------

namespace {

std::vector<PreTokenizerStep> parse_pre_tokenizer(const json& p, const std::string& where) {
  std::vector<PreTokenizerStep> steps;
  if (p.is_null()) return steps;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& sub : p.at("pretokenizers")) {
      auto more = parse_pre_tokenizer(sub, where);
      steps.insert(steps.end(), more.begin(), more.end());
    }
  } else if (type == "ByteLevel") {
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::kByteLevel;
    s.add_prefix_space = flag(p, "add_prefix_space", true);
    if (flag(p, "use_regex", true)) s.regex = std::make_shared<Regex>(kGpt2Pattern, false, where);
    steps.push_back(std::move(s));
  } else if (type == "Split") {
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::kSplit;
    const json& pattern = p.at("pattern");
    if (pattern.contains("Regex")) {
      s.regex = std::make_shared<Regex>(pattern.at("Regex").get<std::string>(), false, where);
    } else if (pattern.contains("String")) {
      s.regex = std::make_shared<Regex>(pattern.at("String").get<std::string>(), true, where);
    } else {
      throw DataError(where + ": pre_tokenizer Split has a pattern that is neither Regex nor String");
    }
    const std::string behavior = p.value("behavior", "Isolated");
    if (behavior == "Isolated") s.behavior = SplitBehavior::kIsolated;
    else if (behavior == "Removed") s.behavior = SplitBehavior::kRemoved;
    else if (behavior == "MergedWithPrevious") s.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") s.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") s.behavior = SplitBehavior::kContiguous;
    else throw DataError(where + ": pre_tokenizer Split behavior '" + behavior + "' is not supported");
    s.invert = flag(p, "invert");
    steps.push_back(std::move(s));
  } else if (type == "Digits") {
    // Rust's char::is_numeric is \p{N}; individual digits are isolated one by one, otherwise
    // runs of them (Contiguous over single-character matches is the same as \p{N}+ isolated).
    PreTokenizerStep s;
    s.kind = PreTokenizerStep::Kind::kSplit;
    s.regex = std::make_shared<Regex>(flag(p, "individual_digits") ? "\\p{N}" : "\\p{N}+", false, where);
    steps.push_back(std::move(s));
  } else {
    throw DataError(where + ": pre_tokenizer type '" + type +
                    "' is not supported (supported: ByteLevel, Split, Digits, Sequence of them)");
  }
  return steps;
}

// Whether the normalizer is NFC (Qwen2); none is fine too, anything else is refused by name.
bool parse_normalizer(const json& n, const std::string& where) {
  if (n.is_null()) return false;
  const std::string type = n.value("type", "");
  if (type == "NFC") return true;
  if (type == "Sequence") {
    bool nfc = false;
    for (const json& sub : n.value("normalizers", json::array())) nfc = parse_normalizer(sub, where) || nfc;
    return nfc;
  }
  throw DataError(where + ": normalizer '" + (type.empty() ? n.dump() : type) +
                  "' is not supported (byte-level BPE here supports none or NFC)");
}

void check_decoder(const json& d, const std::string& where) {
  if (d.is_null()) return;  // the pre-tokenizer's ByteLevel step already fixes the alphabet
  const std::string type = d.value("type", "");
  if (type == "ByteLevel") return;
  throw DataError(where + ": decoder '" + type + "' is not supported (expected ByteLevel)");
}

}  // namespace

void BpeTokenizer::Impl::set_vocab(const json& vocab_json, const std::string& where) {
  if (!vocab_json.is_object()) throw DataError(where + ": the vocabulary is not a JSON object of token -> id");
  const ByteAlphabet& a = alphabet();
  for (const auto& [token, id_json] : vocab_json.items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw DataError(where + ": token '" + token + "' has id " + std::to_string(id));
    if (static_cast<size_t>(id) >= token_bytes.size()) token_bytes.resize(id + 1);
    const auto bytes = a.to_bytes(token);
    token_bytes[id] = bytes ? *bytes : token;
    if (bytes) vocab.emplace(*bytes, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(std::string(1, static_cast<char>(b)));
    byte_id[b] = it == vocab.end() ? -1 : it->second;
  }
  size = static_cast<int64_t>(token_bytes.size());
}

void BpeTokenizer::Impl::add_merge(const std::string& left, const std::string& right, int32_t rank,
                                   const std::string& where) {
  const ByteAlphabet& a = alphabet();
  const auto lb = a.to_bytes(left), rb = a.to_bytes(right);
  auto id_of = [&](const std::optional<std::string>& bytes, const std::string& shown) {
    const auto it = bytes ? vocab.find(*bytes) : vocab.end();
    if (it == vocab.end())
      throw DataError(where + ": merge " + std::to_string(rank) + " ('" + left + " " + right + "') uses '" + shown +
                      "', which is not in the vocabulary");
    return it->second;
  };
  const int32_t l = id_of(lb, left), r = id_of(rb, right);
  const int32_t merged = id_of(std::optional<std::string>(*lb + *rb), left + right);
  merges.insert_or_assign(pair_key(l, r), Merge{rank, merged});  // a repeated pair: the last rank wins, as in HF
}

void BpeTokenizer::Impl::set_added_tokens(const std::vector<AddedToken>& tokens) {
  std::vector<AddedToken> raw, normalized;
  for (const AddedToken& t : tokens) {
    if (static_cast<size_t>(t.id) >= token_bytes.size()) token_bytes.resize(t.id + 1);
    token_bytes[t.id] = t.content;
    // Normalized tokens are matched after the normalizer ran, so their content is normalized too.
    if (!t.normalized) {
      raw.push_back(t);
    } else {
      normalized.push_back(t);
      if (nfc) normalized.back().content = feast::nfc(t.content);
    }
  }
  size = static_cast<int64_t>(token_bytes.size());
  raw_split = AddedTokenSplitter(std::move(raw));
  normalized_split = AddedTokenSplitter(std::move(normalized));
}

void BpeTokenizer::Impl::set_special_ids(const std::string& config_json, const StringMap& by_content,
                                         bool gpt2_defaults) {
  json config = json::object();
  if (!config_json.empty()) config = read_json(config_json);
  auto find = [&](const char* key, std::initializer_list<const char*> defaults) -> std::optional<int32_t> {
    if (const auto name = config_token(config, key)) {
      const auto it = by_content.find(*name);
      if (it == by_content.end())
        throw DataError(config_json + ": " + key + " '" + *name + "' is not a token of " + path);
      return it->second;
    }
    if (gpt2_defaults) {
      if (config.contains(key)) return std::nullopt;
      const auto it = by_content.find(std::string_view("<|endoftext|>"));
      return it == by_content.end() ? std::nullopt : std::optional<int32_t>(it->second);
    }
    for (const char* name : defaults) {
      const auto it = by_content.find(std::string_view(name));
      if (it != by_content.end()) return it->second;
    }
    return std::nullopt;
  };
  eos = find("eos_token", {"<|endoftext|>", "<|end_of_text|>"});
  bos = find("bos_token", {"<|begin_of_text|>"});
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer::BpeTokenizer(const std::string& tokenizer_json, const std::string& config_json)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = tokenizer_json;
  const json j = read_json(tokenizer_json);
  try {
    if (!j.is_object() || !j.contains("model"))
      throw DataError(tokenizer_json + ": no \"model\" object; not a Hugging Face tokenizer.json");
    const json& model = j.at("model");
    const std::string type = model.value("type", "BPE");
    if (type != "BPE")
      throw DataError(tokenizer_json + ": model type '" + type + "' is not supported (only byte-level \"BPE\")");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
        throw DataError(tokenizer_json + ": model." + key + " is not supported by byte-level BPE here");
    }
    if (flag(model, "byte_fallback"))
      throw DataError(tokenizer_json + ": model.byte_fallback is not supported (byte-level BPE needs none)");
    m.ignore_merges = flag(model, "ignore_merges");
    m.nfc = parse_normalizer(j.value("normalizer", json()), tokenizer_json);
    m.steps = parse_pre_tokenizer(j.value("pre_tokenizer", json()), tokenizer_json);
    bool byte_level = false;
    for (size_t i = 0; i < m.steps.size(); ++i) {
      if (m.steps[i].kind != PreTokenizerStep::Kind::kByteLevel) continue;
      if (byte_level) throw DataError(tokenizer_json + ": pre_tokenizer has two ByteLevel steps");
      byte_level = true;
    }
    if (!byte_level)
      throw DataError(tokenizer_json + ": pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
    check_decoder(j.value("decoder", json()), tokenizer_json);

    m.set_vocab(model.at("vocab"), tokenizer_json);
    // The unknown token stands in for a byte the alphabet lacks; without one HF drops the byte.
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto a = alphabet().to_bytes(model["unk_token"].get<std::string>());
      const auto it = a ? m.vocab.find(*a) : m.vocab.end();
      if (it != m.vocab.end())
        for (auto& id : m.byte_id)
          if (id < 0) id = it->second;
    }
    const json& merges = model.at("merges");
    int32_t rank = 0;
    for (const json& merge : merges) {
      if (merge.is_string()) {
        const std::string s = merge.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          throw DataError(tokenizer_json + ": merge " + std::to_string(rank) + " '" + s + "' is not two tokens");
        m.add_merge(s.substr(0, space), s.substr(space + 1), rank, tokenizer_json);
      } else if (merge.is_array() && merge.size() == 2) {
        m.add_merge(merge[0].get<std::string>(), merge[1].get<std::string>(), rank, tokenizer_json);
      } else {
        throw DataError(tokenizer_json + ": merge " + std::to_string(rank) + " is " + merge.dump() +
                        ", neither \"a b\" nor [\"a\", \"b\"]");
      }
      ++rank;
    }

    std::vector<AddedToken> added;
    const json added_json = j.value("added_tokens", json::array());
    for (const json& t : added_json)
      added.push_back(added_token_from(t, t.at("id").get<int32_t>()));
    m.set_added_tokens(added);

    StringMap by_content;
    for (const auto& [token, id] : model.at("vocab").items()) by_content.emplace(token, id.get<int32_t>());
    for (const AddedToken& t : added) by_content.insert_or_assign(t.content, t.id);
    m.set_special_ids(config_json, by_content);
  } catch (const json::exception& e) {
    throw DataError(tokenizer_json + ": unexpected structure (" + e.what() + ")");
  }
}

BpeTokenizer BpeTokenizer::from_vocab_and_merges(const std::string& vocab_json, const std::string& merges_txt,
                                                 const std::string& config_json) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.path = vocab_json;
  const json vocab = read_json(vocab_json);
  try {
    m.set_vocab(vocab, vocab_json);
    std::ifstream in(merges_txt, std::ios::binary);
    if (!in) throw DataError("tokenizer: cannot read " + merges_txt + " (GPT-2's merges, beside " + vocab_json + ")");
    std::string line;
    int32_t rank = 0;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        throw DataError(merges_txt + ":" + std::to_string(line_no) + ": '" + line + "' is not two tokens");
      m.add_merge(line.substr(0, space), line.substr(space + 1), rank++, merges_txt);
    }
    PreTokenizerStep gpt2;  // ByteLevel, no prefix space, GPT-2's regex
    gpt2.regex = std::make_shared<Regex>(kGpt2Pattern, false, vocab_json);
    m.steps.push_back(std::move(gpt2));

    // Added tokens: tokenizer_config.json's added_tokens_decoder, then added_tokens.json, then
    // its special tokens; GPT2Tokenizer's <|endoftext|> for those the config does not name.
    StringMap by_content;
    for (const auto& [token, id] : vocab.items()) by_content.emplace(token, id.get<int32_t>());
    std::vector<AddedToken> added;
    auto add = [&](AddedToken t) {
      for (const AddedToken& a : added)
        if (a.content == t.content) return;
      added.push_back(t);
      by_content.insert_or_assign(t.content, t.id);
    };
    json config = json::object();
    if (!config_json.empty()) config = read_json(config_json);
    const json decoder = config.value("added_tokens_decoder", json::object());
    for (const auto& [id, t] : decoder.items())
      add(added_token_from(t, std::stoi(id)));
    const std::string added_path = (std::filesystem::path(vocab_json).parent_path() / "added_tokens.json").string();
    if (std::filesystem::is_regular_file(added_path)) {
      const json added_json = read_json(added_path);
      for (const auto& [content, id] : added_json.items())
        add(AddedToken{content, id.get<int32_t>(), false, false, false, false, true});
    }
    std::vector<std::string> specials;
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      if (const auto name = config_token(config, key)) specials.push_back(*name);
      else if (!config.contains(key) && std::string_view(key) != "pad_token") specials.push_back("<|endoftext|>");
    }
    for (const std::string& name : specials) {
      const auto it = by_content.find(name);
      if (it != by_content.end()) add(AddedToken{name, it->second, true, false, false, false, false});
    }
    m.set_added_tokens(added);
    m.set_special_ids(config_json, by_content, /*gpt2_defaults=*/true);
  } catch (const json::exception& e) {
    throw DataError(vocab_json + ": unexpected structure (" + e.what() + ")");
  }
  return BpeTokenizer(std::move(impl));
}

// ---- Encoding -------------------------------------------------------------------------------

void BpeTokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<AddedTokenSplitter::Piece> first, second;
  raw_split.split(text, first);
  for (const auto& p : first) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    std::string normalized;
    std::string_view piece = p.text;
    if (nfc) {
      normalized = feast::nfc(piece);
      piece = normalized;
    }
    second.clear();
    normalized_split.split(piece, second);
    for (const auto& q : second) {
      if (q.id >= 0) out.push_back(q.id);
      else pre_tokenize(q.text, 0, false, out);
    }
  }
}

// Runs pre-tokenizer steps [step, end) on `piece` (raw bytes), then BPE on each final piece.
// `mapped`: a ByteLevel step ran already, so later Split steps see GPT-2's alphabet, as in HF.
void BpeTokenizer::Impl::pre_tokenize(std::string_view piece, size_t step, bool mapped,
                                      std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (step == steps.size()) {
    bpe(piece, out);
    return;
  }
  const PreTokenizerStep& s = steps[step];
  if (s.kind == PreTokenizerStep::Kind::kSplit) {
    apply_split(s, piece, step, mapped, out);
    return;
  }
  std::string prefixed;
  if (s.add_prefix_space && piece[0] != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(piece);
    piece = prefixed;
  }
  if (!s.regex) {
    pre_tokenize(piece, step + 1, true, out);
    return;
  }
  // GPT-2's pattern matches every character, so the gaps are always empty; keep them anyway.
  size_t last = 0;
  s.regex->for_each_match(piece, [&](size_t start, size_t end) {
    if (start > last) pre_tokenize(piece.substr(last, start - last), step + 1, true, out);
    pre_tokenize(piece.substr(start, end - start), step + 1, true, out);
    last = end;
  });
  if (last < piece.size()) pre_tokenize(piece.substr(last), step + 1, true, out);
}

void BpeTokenizer::Impl::apply_split(const PreTokenizerStep& s, std::string_view piece, size_t step,
                                     bool mapped, std::vector<int32_t>& out) const {
  // After ByteLevel the pattern runs on the mapped text; each mapped character is one byte, so
  // the pieces map back exactly.
  std::string unicode;
  std::string_view subject = piece;
  if (mapped) {
    unicode = alphabet().to_unicode(piece);
    subject = unicode;
  }
  auto emit = [&](size_t start, size_t end) {
    if (end <= start) return;
    const std::string_view sub = subject.substr(start, end - start);
    if (!mapped) {
      pre_tokenize(sub, step + 1, mapped, out);
    } else {
      pre_tokenize(*alphabet().to_bytes(sub), step + 1, mapped, out);
    }
  };
  if (s.behavior == SplitBehavior::kIsolated || (s.behavior == SplitBehavior::kRemoved && !s.invert)) {
    // The common case streams: gaps and matches in order (Removed drops the matches).
    const bool keep_matches = s.behavior == SplitBehavior::kIsolated;
    size_t last = 0;
    s.regex->for_each_match(subject, [&](size_t start, size_t end) {
      emit(last, start);
      if (keep_matches) emit(start, end);
      last = end;
    });
    emit(last, subject.size());
    return;
  }
  // HF's SplitDelimiterBehavior over the (span, is_match) cover of the piece.
  struct Span {
    size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  s.regex->for_each_match(subject, [&](size_t start, size_t end) {
    if (start > last) spans.push_back({last, start, false});
    spans.push_back({start, end, true});
    last = end;
  });
  if (last < subject.size()) spans.push_back({last, subject.size(), false});
  if (s.invert)
    for (Span& sp : spans) sp.is_match = !sp.is_match;
  std::vector<Span> result;
  bool previous_match = false;
  switch (s.behavior) {
    case SplitBehavior::kIsolated:
      result = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& sp : spans)
        if (!sp.is_match) result.push_back(sp);
      break;
    case SplitBehavior::kContiguous:
      for (const Span& sp : spans) {
        if (sp.is_match == previous_match && !result.empty()) result.back().end = sp.end;
        else result.push_back(sp);
        previous_match = sp.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& sp : spans) {
        if (sp.is_match && !previous_match && !result.empty()) result.back().end = sp.end;
        else result.push_back(sp);
        previous_match = sp.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !result.empty()) result.back().start = it->start;
        else result.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(result.begin(), result.end());
      break;
  }
  for (const Span& sp : result) emit(sp.start, sp.end);
}

void BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {  // Llama-3: a piece that is itself a token is emitted whole
    const auto it = vocab.find(piece);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    const int32_t id = byte_id[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    merge_word(piece, out);
    return;
  }
  {
    std::unique_lock lock(cache_mutex, std::try_to_lock);  // busy: another thread; just compute
    if (lock.owns_lock()) {
      const auto it = cache.find(piece);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
  }
  const size_t before = out.size();
  merge_word(piece, out);
  std::unique_lock lock(cache_mutex, std::try_to_lock);
  if (lock.owns_lock()) {
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + before, out.end()));
  }
}

// HF's Word::merge_all: a heap of candidate pairs ordered by (rank, position); a popped
// candidate is stale when either side has merged since, which the id check detects.
void BpeTokenizer::Impl::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;  // a min-heap through std::push_heap/pop_heap
  symbols.clear();
  heap.clear();
  for (char c : piece) {
    const int32_t id = byte_id[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // a byte the vocabulary lacks, with no unknown token: HF drops it
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  }
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, pos, it->second.id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  check_utf8(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  impl_->encode_text(text, out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) {
    if (id < 0 || id >= impl_->size) {
      throw DataError(impl_->path + ": cannot decode token id " + std::to_string(id) + " (vocabulary size " +
                      std::to_string(impl_->size) + ")");
    }
    text += impl_->token_bytes[id];
  }
  return text;
}

int64_t BpeTokenizer::vocab_size() const { return impl_->size; }
std::optional<int32_t> BpeTokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> BpeTokenizer::bos_id() const { return impl_->bos; }

}  // namespace feast
