// BpeTokenizer's state, shared by the files that fill it (bpe_load.cpp: tokenizer.json, or
// vocab.json + merges.txt) and use it (bpe_tokenizer.cpp: encoding and decoding), with the
// pre-tokenizer steps and merges it holds. Internal to data/tokenizer/.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer/bpe_regex.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/tokenizer.h"

namespace feast {
namespace bpe_detail {

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

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace bpe_detail

struct BpeTokenizer::Impl {
  std::string path;  // what error messages name
  bpe_detail::StringMap vocab;                             // raw bytes -> id (byte-representable tokens)
  std::vector<std::string> token_bytes;                    // id -> bytes it decodes to
  std::array<int32_t, 256> byte_id{};                      // a single byte's token; -1: HF drops it
  std::unordered_map<uint64_t, bpe_detail::Merge> merges;  // (left id, right id) -> merge
  bool ignore_merges = false;
  bool nfc = false;  // the normalizer: NFC or nothing
  std::vector<bpe_detail::PreTokenizerStep> steps;
  AddedTokenSplitter raw_split, normalized_split;
  int64_t size = 0;
  std::optional<int32_t> eos, bos;
  std::unordered_set<int32_t> special_ids;  // added tokens marked special

  // Words seen before: real text repeats a small set of words, so most pieces are a lookup.
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, bpe_detail::StringHash, std::equal_to<>> cache;
  static constexpr size_t kMaxCacheEntries = 1 << 20;
  static constexpr size_t kMaxCachedPiece = 256;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void pre_tokenize(std::string_view piece, size_t step, bool mapped, std::vector<int32_t>& out) const;
  void apply_split(const bpe_detail::PreTokenizerStep& s, std::string_view piece, size_t step, bool mapped,
                   std::vector<int32_t>& out) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  // Setup shared by both file formats.
  void set_vocab(const nlohmann::json& vocab_json, const std::string& where);
  void add_merge(const std::string& left, const std::string& right, int32_t rank, const std::string& where);
  void set_added_tokens(const std::vector<AddedToken>& tokens);
  // `gpt2_defaults`: GPT2Tokenizer's, <|endoftext|> for bos and eos unless the config has the key
  // (a null value there means none).
  void set_special_ids(const std::string& config_json, const bpe_detail::StringMap& by_content,
                       bool gpt2_defaults = false);
};

}  // namespace feast
