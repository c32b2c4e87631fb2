// Byte-level BPE: GPT-2's vocab.json + merges.txt against its tokenizer.json, and the
// pre-tokenizers, added-token flags and NFC normalizer on a synthetic tokenizer.json against
// `tokenizers` 0.19.1; and the NFC normalization itself.
#include "data/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/unicode_nfc.h"
#include "tests/data/tokenizer/tokenizer_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using nlohmann::json;
using namespace ::feast::testing;  // tokenizer_test_helpers.h

TEST(BpeTokenizer, Gpt2FromVocabAndMergesGivesTheSameIdsAsFromTokenizerJson) {
  const std::string dir = kTokenizers + "/bpe-gpt2";
  const auto from_json = load_tokenizer(dir + "/tokenizer.json");
  const BpeTokenizer from_files =
      BpeTokenizer::from_vocab_and_merges(dir + "/vocab.json", dir + "/merges.txt", dir + "/tokenizer_config.json");
  testing::TempDir only_files;  // a folder without tokenizer.json: load_tokenizer must take the pair
  for (const char* f : {"vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json"})
    std::filesystem::copy_file(dir + "/" + f, only_files.file(f));
  const auto from_folder = load_tokenizer(only_files.path());
  const json& strings = cases().at("strings");
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string s = strings[i].get<std::string>();
    const Ids expected = cases().at("bpe-gpt2")[i].get<Ids>();
    EXPECT_EQ(from_json->encode(s), expected) << json(s).dump();
    EXPECT_EQ(from_files.encode(s), expected) << json(s).dump();
    EXPECT_EQ(from_folder->encode(s), expected) << json(s).dump();
    EXPECT_EQ(from_folder->decode(expected), s);
  }
  EXPECT_EQ(from_folder->vocab_size(), from_json->vocab_size());
  EXPECT_EQ(from_folder->eos_id(), from_json->eos_id());
}

TEST(BpeTokenizer, Gpt2FilesWithoutAConfigHaveGpt2TokenizersEndOfTextDefaults) {
  // GPT2Tokenizer's defaults: bos, eos and unk are <|endoftext|> unless the config says otherwise.
  const std::string dir = kTokenizers + "/bpe-gpt2";
  testing::TempDir bare, with_null;
  for (const auto* d : {&bare, &with_null})
    for (const char* f : {"vocab.json", "merges.txt"}) std::filesystem::copy_file(dir + "/" + f, d->file(f));
  const auto tok = load_tokenizer(bare.path());
  const int32_t endoftext = 317;  // vocab.json's <|endoftext|>
  EXPECT_EQ(tok->bos_id(), endoftext);
  EXPECT_EQ(tok->eos_id(), endoftext);
  EXPECT_EQ(tok->encode("a<|endoftext|>"), (Ids{64, endoftext}));
  write_file(with_null.file("tokenizer_config.json"), R"({"bos_token": null, "eos_token": "<|endoftext|>"})");
  const auto no_bos = load_tokenizer(with_null.path());
  EXPECT_FALSE(no_bos->bos_id().has_value());
  EXPECT_EQ(no_bos->eos_id(), endoftext);
}

// ---- Pre-tokenizers and added-token flags on a synthetic byte-level tokenizer ----------------

// GPT-2's byte alphabet as vocabulary ids 0..255, then a few merges, as tokenizer.json text.
json synthetic_tokenizer(const json& pre_tokenizer, const json& added_tokens = json::array(),
                         const json& normalizer = nullptr) {
  std::vector<int> order;
  for (int b = 0; b < 256; ++b)
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) order.push_back(b);
  const size_t printable = order.size();
  json vocab = json::object();
  for (size_t i = 0; i < 256; ++i) {
    const uint32_t cp = i < printable ? static_cast<uint32_t>(order[i]) : static_cast<uint32_t>(256 + i - printable);
    std::string utf8 = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                                 : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    vocab[utf8] = i;
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"ab", "c"}, {"\xC4\xA0", "a"}, {"1", "2"}, {"c", "\xC4\xA0"}, {"\xC4\xA0" "a", "b"}, {"x", "x"}, {"xx", "xx"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = vocab.size();
    merge_list.push_back(a + " " + b);
  }
  return {{"version", "1.0"},
          {"added_tokens", added_tokens},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json byte_level(bool regex, bool prefix = false) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", true}, {"use_regex", regex}};
}
json split_then_bytes(const std::string& kind, const std::string& pattern, const std::string& behavior,
                      bool invert = false) {
  return {{"type", "Sequence"},
          {"pretokenizers", {{{"type", "Split"}, {"pattern", {{kind, pattern}}}, {"behavior", behavior}, {"invert", invert}},
                             byte_level(false)}}};
}
json added(int id, const std::string& content, const std::string& flag_name) {
  json t = {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
            {"normalized", false}, {"special", true}};
  if (!flag_name.empty()) t[flag_name] = true;
  return t;
}

const std::vector<std::string> kSyntheticStrings = {
    "abc abcab c", "ab c  abcc cab", "12 123 a1b2c3", "xxxxxxx abab", " ab <L>  abc <R>  ab\n<L><R>",
    "abc xabc abc_ abc, abc", "<a><b><a><<a>", "ccc abcbc", "aab ab  ab", "ca cab ca, xca ca_ ca"};

// From tokenizers 0.19.1: Tokenizer.from_str(that json).encode(s, add_special_tokens=False).ids.
const std::map<std::string, std::vector<Ids>> kSyntheticIds = {
    {"removed", {{257, 257, 256, 66}, {256, 66, 257, 66, 66, 256}, {259, 259, 18, 64, 16, 65, 17, 66, 18}, {263, 262, 87, 256, 256}, {256, 27, 43, 29, 257, 27, 49, 29, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 87, 257, 257, 62, 257, 11, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 257, 65, 66}, {64, 256, 256, 256}, {66, 64, 66, 256, 66, 64, 11, 87, 66, 64, 66, 64, 62, 66, 64}}},
    {"merged_with_previous", {{257, 220, 257, 256, 220, 66}, {256, 220, 66, 220, 220, 257, 66, 220, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 220, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"merged_with_next", {{256, 260, 256, 66, 256, 220, 66}, {256, 220, 260, 220, 256, 66, 260, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 256, 260, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {256, 260, 87, 256, 260, 256, 66, 62, 220, 256, 66, 11, 220, 256, 66}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 260, 256, 66, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"contiguous", {{64, 65, 66, 258, 65, 66, 64, 65, 220, 66}, {64, 65, 220, 66, 220, 258, 65, 66, 66, 220, 66, 64, 65}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 258, 65, 64, 65}, {258, 65, 220, 27, 43, 29, 220, 258, 65, 66, 220, 27, 49, 29, 220, 258, 65, 198, 27, 43, 29, 27, 49, 29}, {64, 65, 66, 220, 87, 64, 65, 66, 258, 65, 66, 62, 258, 65, 66, 11, 258, 65, 66}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 258, 65, 66, 65, 66}, {64, 64, 65, 258, 65, 220, 258, 65}, {66, 64, 220, 66, 64, 65, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"isolated_inverted", {{256, 260, 256, 66, 256, 220, 66}, {256, 220, 260, 220, 256, 66, 260, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 256, 260, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {256, 260, 87, 256, 260, 256, 66, 62, 220, 256, 66, 11, 220, 256, 66}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 260, 256, 66, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"merged_with_next_inverted", {{64, 65, 66, 258, 65, 66, 64, 65, 220, 66}, {64, 65, 220, 260, 258, 65, 66, 260, 66, 64, 65}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 258, 65, 64, 65}, {258, 65, 220, 27, 43, 29, 220, 258, 65, 260, 27, 49, 29, 220, 258, 65, 198, 27, 43, 29, 27, 49, 29}, {64, 65, 260, 87, 64, 65, 66, 258, 65, 66, 62, 258, 65, 66, 11, 258, 65, 66}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 258, 65, 66, 65, 66}, {64, 64, 65, 258, 65, 220, 258, 65}, {66, 64, 220, 66, 64, 65, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"digits_individual", {{257, 220, 257, 256, 220, 66}, {256, 220, 260, 220, 257, 260, 66, 256}, {16, 17, 220, 16, 17, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 260, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"digits_runs", {{257, 220, 257, 256, 220, 66}, {256, 220, 260, 220, 257, 260, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 260, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"prefix_space", {{220, 257, 220, 257, 256, 220, 66}, {220, 256, 220, 66, 220, 220, 257, 66, 220, 66, 256}, {220, 259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {220, 263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {220, 257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {220, 27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {220, 66, 66, 66, 220, 257, 65, 66}, {258, 256, 220, 256, 220, 220, 256}, {220, 66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"split_after_bytelevel", {{257, 220, 257, 256, 220, 66}, {256, 220, 66, 220, 220, 257, 66, 220, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 220, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"added_lstrip_rstrip", {{257, 220, 257, 256, 220, 66}, {256, 220, 66, 220, 220, 257, 66, 220, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 264, 220, 220, 257, 220, 265, 256, 264, 265}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 220, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
    {"added_single_word", {{257, 220, 257, 256, 220, 66}, {256, 220, 66, 220, 220, 257, 66, 220, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {27, 64, 29, 27, 65, 29, 27, 64, 29, 27, 27, 64, 29}, {66, 66, 66, 220, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {264, 220, 66, 256, 220, 264, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 264}}},
    {"added_longest_first", {{257, 220, 257, 256, 220, 66}, {256, 220, 66, 220, 220, 257, 66, 220, 66, 256}, {259, 220, 259, 18, 258, 16, 65, 17, 66, 18}, {263, 262, 87, 220, 256, 256}, {220, 256, 220, 27, 43, 29, 220, 220, 257, 220, 27, 49, 29, 220, 220, 256, 198, 27, 43, 29, 27, 49, 29}, {257, 220, 87, 257, 220, 257, 62, 220, 257, 11, 220, 257}, {265, 266, 264}, {66, 66, 66, 220, 257, 65, 66}, {64, 256, 220, 256, 220, 220, 256}, {66, 64, 220, 66, 256, 220, 66, 64, 11, 220, 87, 66, 64, 220, 66, 64, 62, 220, 66, 64}}},
};

std::map<std::string, json> synthetic_configs() {
  const json gpt2 = byte_level(true);
  json single = added(264, "ca", "single_word");
  single["special"] = false;
  single["normalized"] = true;
  return {
      {"removed", synthetic_tokenizer(split_then_bytes("String", " ", "Removed"))},
      {"merged_with_previous", synthetic_tokenizer(split_then_bytes("String", "c", "MergedWithPrevious"))},
      {"merged_with_next", synthetic_tokenizer(split_then_bytes("String", "c", "MergedWithNext"))},
      {"contiguous", synthetic_tokenizer(split_then_bytes("Regex", "[bc]", "Contiguous"))},
      {"isolated_inverted", synthetic_tokenizer(split_then_bytes("Regex", "ab+", "Isolated", true))},
      {"merged_with_next_inverted", synthetic_tokenizer(split_then_bytes("String", "a", "MergedWithNext", true))},
      {"digits_individual", synthetic_tokenizer(json{{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(false)}}})},
      {"digits_runs", synthetic_tokenizer(json{{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", false}}, byte_level(false)}}})},
      {"prefix_space", synthetic_tokenizer(byte_level(true, true))},
      {"split_after_bytelevel",
       synthetic_tokenizer(json{{"type", "Sequence"},
                                {"pretokenizers", {gpt2, {{"type", "Split"}, {"pattern", {{"String", "\xC4\xA0"}}}, {"behavior", "MergedWithNext"}, {"invert", false}}}}})},
      {"added_lstrip_rstrip", synthetic_tokenizer(gpt2, {added(264, "<L>", "lstrip"), added(265, "<R>", "rstrip")})},
      {"added_single_word", synthetic_tokenizer(gpt2, json::array({single}))},
      {"added_longest_first", synthetic_tokenizer(gpt2, {added(264, "<a>", ""), added(265, "<a><b>", ""), added(266, "<a><", "")})},
  };
}

TEST(BpeTokenizer, PreTokenizersAndAddedTokenFlagsMatchHuggingFace) {
  testing::TempDir dir;
  const auto configs = synthetic_configs();
  ASSERT_EQ(configs.size(), kSyntheticIds.size());
  for (const auto& [name, tokenizer_json] : configs) {
    const std::string path = dir.file(name + ".json");
    write_file(path, tokenizer_json.dump());
    const BpeTokenizer tok(path);
    const std::vector<Ids>& expected = kSyntheticIds.at(name);
    ASSERT_EQ(expected.size(), kSyntheticStrings.size());
    for (size_t i = 0; i < kSyntheticStrings.size(); ++i)
      EXPECT_EQ(tok.encode(kSyntheticStrings[i]), expected[i]) << name << ", case " << i << ": " << json(kSyntheticStrings[i]).dump();
  }
}

TEST(BpeTokenizer, MergesAsPairsEqualMergesAsStrings) {
  testing::TempDir dir;
  json j = synthetic_tokenizer(byte_level(true));
  write_file(dir.file("strings.json"), j.dump());
  json pairs = json::array();
  for (const json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["model"]["merges"] = pairs;
  write_file(dir.file("pairs.json"), j.dump());
  const BpeTokenizer a(dir.file("strings.json")), b(dir.file("pairs.json"));
  for (const std::string& s : kSyntheticStrings) EXPECT_EQ(a.encode(s), b.encode(s)) << s;
  EXPECT_EQ(a.encode("xxxxxxx abab"), (Ids{263, 262, 87, 220, 256, 256}));
}

TEST(BpeTokenizer, UnsupportedPartsAreNamed) {
  testing::TempDir dir;
  const std::vector<std::pair<json, std::string>> bad = {
      {synthetic_tokenizer(byte_level(true), json::array(), {{"type", "Lowercase"}}), "Lowercase"},
      {synthetic_tokenizer(byte_level(true), json::array(), {{"type", "NFKC"}}), "NFKC"},
      {synthetic_tokenizer(json{{"type", "Metaspace"}}), "Metaspace"},
      {synthetic_tokenizer(split_then_bytes("Regex", "a", "Sideways")), "Sideways"},
      {synthetic_tokenizer(json{{"type", "Whitespace"}}), "Whitespace"},
      {synthetic_tokenizer(split_then_bytes("Regex", "(unclosed", "Isolated")), "(unclosed"},
  };
  for (const auto& [j, word] : bad) {
    write_file(dir.file("tokenizer.json"), j.dump());
    const std::string message = data_error([&] { BpeTokenizer tok(dir.file("tokenizer.json")); });
    EXPECT_NE(message.find(word), std::string::npos) << message;
    EXPECT_NE(message.find(dir.file("tokenizer.json")), std::string::npos) << message;
  }
  json wordpiece = synthetic_tokenizer(byte_level(true));
  wordpiece["model"]["type"] = "WordPiece";
  write_file(dir.file("tokenizer.json"), wordpiece.dump());
  EXPECT_NE(data_error([&] { BpeTokenizer tok(dir.file("tokenizer.json")); }).find("WordPiece"), std::string::npos);
}

TEST(BpeTokenizer, TheNfcNormalizerMatchesHuggingFace) {
  // Decomposed marks, marks out of canonical order, a singleton (Angstrom sign), Hangul jamo,
  // and a normalized added token written precomposed but matched in decomposed text.
  testing::TempDir dir;
  json added_token = added(264, "\u00e9ab", "");
  added_token["content"] = "\xC3\xA9" "ab";
  added_token["special"] = false;
  added_token["normalized"] = true;
  write_file(dir.file("tokenizer.json"),
             synthetic_tokenizer(byte_level(true), json::array({added_token}), {{"type", "NFC"}}).dump());
  const BpeTokenizer tok(dir.file("tokenizer.json"));
  const std::vector<std::pair<std::string, Ids>> cases = {  // ids from tokenizers 0.19.1
      {"e\xCC\x81 cafe\xCC\x81", {127, 102, 220, 66, 64, 69, 127, 102}},
      {"A\xCC\xA7\xCC\x8A \xE2\x84\xAB", {127, 227, 136, 100, 220, 127, 227}},
      {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8 \xEA\xB0\x80\xE1\x86\xA8", {166, 108, 223, 220, 166, 108, 223}},
      {"x\xCC\x81\xCC\xA7" "ab", {87, 136, 100, 136, 223, 256}},
      {"ab\xC3\xA9" "ab ab e\xCC\x81" "ab", {256, 264, 220, 256, 220, 264}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(tok.encode(text), ids) << json(text).dump();
    EXPECT_EQ(tok.decode(ids), nfc(text));  // decode gives the normalized text back
  }
}

TEST(UnicodeNfc, ComposesReordersAndLeavesOtherTextAlone) {
  // Expected strings from Python's unicodedata.normalize("NFC", ...).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cafe\xCC\x81", "caf\xC3\xA9"},                                  // e + acute
      {"A\xCC\x8A\xCC\xA7", "\xC3\x85\xCC\xA7"},                    // marks reordered, then A-ring composes
      {"\xE2\x84\xAB", "\xC3\x85"},                                    // Angstrom sign -> A-ring (singleton)
      {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"},    // Hangul L V T -> syllable
      {"\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81"},                 // LV syllable + T
      {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"},                 // excluded from composition: stays decomposed
      {"\xCC\x81" "a", "\xCC\x81" "a"},                                  // a mark with nothing before it
      {"plain ASCII, Latin-1 \xC3\xA9 and \xE6\x97\xA5\xE6\x9C\xAC", "plain ASCII, Latin-1 \xC3\xA9 and \xE6\x97\xA5\xE6\x9C\xAC"},
      {"", ""},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(nfc(in), out) << json(in).dump();
}

TEST(BpeTokenizer, LongPiecesAreMergedLikeShortOnes) {
  // One 3000-byte piece (a run of x's): the heap-based merge must stay exact and fast.
  testing::TempDir dir;
  write_file(dir.file("tokenizer.json"), synthetic_tokenizer(byte_level(true)).dump());
  const BpeTokenizer tok(dir.file("tokenizer.json"));
  const Ids ids = tok.encode(std::string(3001, 'x'));
  ASSERT_EQ(ids.size(), 751u);  // 750 "xxxx" then one "x"
  EXPECT_EQ(ids.front(), 263);
  EXPECT_EQ(ids.back(), 87);
  EXPECT_EQ(tok.decode(ids), std::string(3001, 'x'));
}

}  // namespace
}  // namespace feast
