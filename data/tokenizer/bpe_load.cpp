// Loading byte-level BPE: tokenizer.json (model, normalizer, pre-tokenizer, decoder, added
// tokens) or GPT-2's vocab.json + merges.txt, with tokenizer_config.json's special tokens.
// Anything this implementation does not support is refused by name.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer/bpe_impl.h"
#include "data/tokenizer/bpe_regex.h"
#include "data/tokenizer/byte_alphabet.h"
#include "data/tokenizer/hf_json.h"
#include "data/tokenizer/unicode_nfc.h"

namespace feast {

using nlohmann::json;
using namespace bpe_detail;

namespace {

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// ---- JSON helpers ---------------------------------------------------------------------------

bool flag(const json& obj, const char* key, bool fallback = false) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? fallback : it->get<bool>();
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
    if (t.special) special_ids.insert(t.id);
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
      if (it == by_content.end()) continue;
      // A special token added_tokens.json listed already (as a plain added token) is special.
      for (AddedToken& a : added)
        if (a.content == name) a.special = true;
      add(AddedToken{name, it->second, true, false, false, false, false});
    }
    m.set_added_tokens(added);
    m.set_special_ids(config_json, by_content, /*gpt2_defaults=*/true);
  } catch (const json::exception& e) {
    throw DataError(vocab_json + ": unexpected structure (" + e.what() + ")");
  }
  return BpeTokenizer(std::move(impl));
}

}  // namespace feast
