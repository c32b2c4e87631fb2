// Tokenizers against Hugging Face. The ids come from HF itself (tests/fixtures/hf/tokenizers:
// cases.json by make_hf_fixtures.py, corpus_ids.json by make_tokenizer_corpus_ids.py; the
// pre-tokenizer table below from `tokenizers` 0.19.1 on the synthetic tokenizer.json built here).
// SentencePiece is compared with the slow LlamaTokenizer (legacy=False): LlamaTokenizerFast loses
// a space at the start of text (see cases.json's notes) and could not round-trip.
#include "data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/byte_tokenizer.h"
#include "data/tokenizer/sentencepiece_tokenizer.h"
#include "data/tokenizer/unicode_nfc.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const std::string kFixtures = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf";
const std::string kTokenizers = kFixtures + "/tokenizers";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const json& cases() {
  static const json j = json::parse(read_file(kTokenizers + "/cases.json"));
  return j;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the DataError `f` throws ("" if it throws none).
template <typename F>
std::string data_error(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

struct HfTokenizer {
  const char* name;    // test name
  const char* folder;  // under tests/fixtures/hf/tokenizers
  const char* column;  // in cases.json and corpus_ids.json
  const char* kind;
};

class HfCases : public ::testing::TestWithParam<HfTokenizer> {};

TEST_P(HfCases, EncodeGivesHuggingFacesIdsAndDecodeInvertsIt) {
  const HfTokenizer& p = GetParam();
  const auto tok = load_tokenizer(kTokenizers + "/" + p.folder);
  EXPECT_EQ(tok->kind(), p.kind);
  const json& strings = cases().at("strings");
  const json& expected = cases().at(p.column);
  ASSERT_EQ(strings.size(), expected.size());
  ASSERT_GE(strings.size(), 30u);
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string s = strings[i].get<std::string>();
    const Ids ids = tok->encode(s);
    EXPECT_EQ(ids, expected[i].get<Ids>()) << "case " << i << ": " << json(s).dump();
    EXPECT_EQ(tok->decode(ids), s) << "case " << i << ": " << json(s).dump();
    for (int32_t id : ids) EXPECT_LT(id, tok->vocab_size());
  }
}

TEST_P(HfCases, SpecialTokensAndVocabularySizeAreHuggingFaces) {
  const HfTokenizer& p = GetParam();
  const auto tok = load_tokenizer(kTokenizers + "/" + p.folder);
  const json& s = cases().at("specials").at(p.column);
  EXPECT_EQ(tok->vocab_size(), s.at("vocab_size").get<int64_t>());
  ASSERT_TRUE(tok->bos_id().has_value());
  ASSERT_TRUE(tok->eos_id().has_value());
  EXPECT_EQ(*tok->bos_id(), s.at("bos_token_id").get<int32_t>());
  EXPECT_EQ(*tok->eos_id(), s.at("eos_token_id").get<int32_t>());
  // Special tokens decode to their text.
  const Ids eos{*tok->eos_id()};
  EXPECT_EQ(tok->decode(eos), s.at("eos_token").get<std::string>());
}

TEST_P(HfCases, TheWholeCorpusGivesHuggingFacesIds) {
  const HfTokenizer& p = GetParam();
  const auto tok = load_tokenizer(kTokenizers + "/" + p.folder);
  const std::string corpus = read_file(kFixtures + "/corpus.txt");
  const json ref = json::parse(read_file(kTokenizers + "/corpus_ids.json"));
  ASSERT_EQ(ref.at("corpus_bytes").get<size_t>(), corpus.size()) << "corpus.txt changed: rerun make_tokenizer_corpus_ids.py";
  const Ids expected = ref.at(p.column).get<Ids>();
  const Ids ids = tok->encode(corpus);
  ASSERT_EQ(ids.size(), expected.size());
  size_t first_difference = ids.size();
  for (size_t i = 0; i < ids.size() && first_difference == ids.size(); ++i)
    if (ids[i] != expected[i]) first_difference = i;
  EXPECT_EQ(first_difference, ids.size()) << "first different id at index " << first_difference;
  EXPECT_EQ(tok->decode(ids), corpus);
}

TEST_P(HfCases, InvalidUtf8IsRejectedAtItsOffset) {
  const auto tok = load_tokenizer(kTokenizers + "/" + GetParam().folder);
  const std::vector<std::pair<std::string, int>> bad = {
      {"abc\xff", 3},             // never valid
      {"ok \xe6\x97", 3},         // truncated 3-byte sequence
      {"\xc0\xaf", 0},            // overlong '/'
      {"xy\xed\xa0\x80z", 2},     // UTF-16 surrogate
      {"12345678\xf4\x90\x80\x80", 8},  // above U+10FFFF, after an ASCII fast-path block
      {"h\xc3\xa9llo\x80", 6},    // stray continuation byte after valid text
  };
  for (const auto& [text, offset] : bad) {
    const std::string message = data_error([&] { tok->encode(text); });
    EXPECT_NE(message.find("invalid UTF-8 at byte offset " + std::to_string(offset)), std::string::npos)
        << ::testing::PrintToString(text) << ": " << message;
  }
  EXPECT_NO_THROW(tok->encode("h\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82"));  // é 日 🙂
}

TEST_P(HfCases, DecodeRejectsIdsOutsideTheVocabulary) {
  const auto tok = load_tokenizer(kTokenizers + "/" + GetParam().folder);
  const auto size = static_cast<int32_t>(tok->vocab_size());
  EXPECT_NE(data_error([&] { tok->decode(Ids{1, size}); }).find(std::to_string(size)), std::string::npos);
  EXPECT_FALSE(data_error([&] { tok->decode(Ids{-1}); }).empty());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfCases,
                         ::testing::Values(HfTokenizer{"BpeGpt2", "bpe-gpt2", "bpe-gpt2", "bpe"},
                                           HfTokenizer{"BpeLlama3", "bpe-llama3", "bpe-llama3", "bpe"},
                                           HfTokenizer{"SentencePiece", "sentencepiece", "sentencepiece-hf-slow",
                                                       "sentencepiece"}),
                         [](const ::testing::TestParamInfo<HfTokenizer>& param_info) { return std::string(param_info.param.name); });

TEST(SentencePieceTokenizer, DiffersFromTheFastHfTokenizerOnlyOnLeadingSpaces) {
  // The columns we do not match, and why: LlamaTokenizerFast prepends no '▁' to text that starts
  // with a space; the sentencepiece library does not split written special tokens off.
  const auto tok = load_tokenizer(kTokenizers + "/sentencepiece");
  const json& strings = cases().at("strings");
  int fast_differs = 0, raw_differs = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string s = strings[i].get<std::string>();
    const Ids ids = tok->encode(s);
    if (ids != cases().at("sentencepiece")[i].get<Ids>()) {
      ++fast_differs;
      EXPECT_TRUE(s.starts_with(' ')) << "case " << i << ": " << json(s).dump();
    }
    if (ids != cases().at("sentencepiece-raw")[i].get<Ids>()) {
      ++raw_differs;
      EXPECT_NE(s.find("<s>"), std::string::npos) << "case " << i << ": " << json(s).dump();
    }
  }
  EXPECT_GT(fast_differs, 0);
  EXPECT_GT(raw_differs, 0);
}

TEST(SentencePieceTokenizer, SpecialTokensInTheMiddleRoundTrip) {
  const auto tok = load_tokenizer(kTokenizers + "/sentencepiece/tokenizer.model");
  for (const std::string s : {"<s>hi</s>", "a <s> b", "\n<s>\n", " <s> ", "x</s>", "</s></s>", "<unk> z"}) {
    const Ids ids = tok->encode(s);
    EXPECT_EQ(tok->decode(ids), s) << json(s).dump();
  }
  const Ids ids = tok->encode("<s>hi</s>");
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), *tok->bos_id());
  EXPECT_EQ(ids.back(), *tok->eos_id());
}

TEST(SentencePieceTokenizer, LegacyModeGivesEveryPieceItsDummyPrefix) {
  // The fixture's model with "legacy": true in its config; ids from transformers 4.44.2 (slow
  // and fast LlamaTokenizer agree here).
  testing::TempDir dir;
  std::filesystem::copy_file(kTokenizers + "/sentencepiece/tokenizer.model", dir.file("tokenizer.model"));
  json config = json::parse(read_file(kTokenizers + "/sentencepiece/tokenizer_config.json"));
  config["legacy"] = true;
  write_file(dir.file("tokenizer_config.json"), config.dump());
  const auto tok = load_tokenizer(dir.path());
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"<s>hi</s>", {1, 312, 403, 2}},           {" hello", {262, 260, 301, 399}},
      {"a <s> b", {261, 395, 1, 262, 415}},      {"hello world", {395, 260, 301, 399, 269, 278, 393}},
      {"\n<s>\nx", {395, 13, 1, 395, 13, 430}}, {"x</s>  y", {395, 430, 2, 262, 395, 417}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(tok->encode(text), ids) << json(text).dump();
    EXPECT_EQ(tok->decode(ids), text) << json(text).dump();
  }
}

// Protocol-buffer fields, to edit the fixture model: appended to its bytes, an embedded message
// (field 2 trainer_spec, 3 normalizer_spec) merges into the one there, a repeated field (1, the
// pieces) gets one more element.
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  out += static_cast<char>(v);
}
std::string proto_varint(uint32_t field, uint64_t value) {
  std::string out;
  put_varint(out, uint64_t{field} << 3);
  put_varint(out, value);
  return out;
}
std::string proto_bytes(uint32_t field, const std::string& bytes) {
  std::string out;
  put_varint(out, (uint64_t{field} << 3) | 2);
  put_varint(out, bytes.size());
  return out + bytes;
}
std::string patched_model(const std::string& extra) {
  return read_file(kTokenizers + "/sentencepiece/tokenizer.model") + extra;
}

// A long multi-line text with what the chunk cuts must not disturb: blank lines, lines that start
// with spaces, tabs or special tokens, CRLF, lines longer than a chunk, non-ASCII.
std::string long_multiline_text() {
  std::string text = "\n  leading newline and spaces\n";
  const std::string corpus = read_file(kFixtures + "/corpus.txt");
  for (int i = 0; i < 6; ++i) {
    text += corpus;
    text += "\n\n\n   indented " + std::to_string(i) + "\r\n\tTab line\n<s> special first\n</s>\n";
    text += std::string(300, 'a') + " " + std::string(250, ' ') + "long line without newline\n";
    text += "h\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\n \n";
  }
  return text + "no final newline";
}

TEST(SentencePieceTokenizer, LongTextEncodedInChunksGivesTheWholeTextsIds) {
  const std::string model = kTokenizers + "/sentencepiece/tokenizer.model";
  const std::string config = kTokenizers + "/sentencepiece/tokenizer_config.json";
  testing::TempDir dir;
  json legacy = json::parse(read_file(config));
  legacy["legacy"] = true;
  write_file(dir.file("legacy.json"), legacy.dump());
  const std::string text = long_multiline_text();
  ASSERT_GT(text.size(), 60000u);
  for (const std::string& cfg : {config, dir.file("legacy.json"), std::string()}) {
    SentencePieceTokenizer whole(model, cfg), chunked(model, cfg);
    ASSERT_TRUE(chunked.splits_at_newlines()) << cfg;
    whole.set_chunk_bytes(text.size());  // one call per run, as before chunking
    const Ids expected = whole.encode(text), expected_continuation = whole.encode_continuation(text);
    for (const size_t bytes : {1, 7, 100, 4096}) {
      chunked.set_chunk_bytes(bytes);
      const Ids ids = chunked.encode(text);
      EXPECT_EQ(ids, expected) << cfg << ", chunks of " << bytes;
      EXPECT_EQ(chunked.decode(ids), text) << cfg << ", chunks of " << bytes;
      EXPECT_EQ(chunked.encode_continuation(text), expected_continuation) << cfg << ", chunks of " << bytes;
    }
  }
  // Hugging Face's ids for the corpus, cut into chunks of ~200 bytes.
  SentencePieceTokenizer chunked(model, config);
  chunked.set_chunk_bytes(200);
  const json ref = json::parse(read_file(kTokenizers + "/corpus_ids.json"));
  EXPECT_EQ(chunked.encode(read_file(kFixtures + "/corpus.txt")), ref.at("sentencepiece-hf-slow").get<Ids>());
}

TEST(SentencePieceTokenizer, ModelsWhoseIdsCouldCrossANewlineAreNotChunked) {
  testing::TempDir dir;
  const std::string charsmap = read_file(kTokenizers + "/sentencepiece_charsmap.bin");  // U+FF46 -> 'f'
  const std::vector<std::pair<std::string, std::string>> models = {
      {"as is", ""},
      {"remove_extra_whitespaces", proto_bytes(3, proto_varint(4, 1))},
      {"treat_whitespace_as_suffix", proto_bytes(2, proto_varint(24, 1))},
      {"word model", proto_bytes(2, proto_varint(3, 3))},
      {"precompiled_charsmap", proto_bytes(3, proto_bytes(2, charsmap))},
      {"user-defined piece \"\\n\\n\"", proto_bytes(1, proto_bytes(1, "\n\n") + proto_varint(3, 4))},
  };
  for (const auto& [name, extra] : models) {
    write_file(dir.file("tokenizer.model"), patched_model(extra));
    const SentencePieceTokenizer tok(dir.file("tokenizer.model"));
    EXPECT_EQ(tok.splits_at_newlines(), name == "as is") << name;
    if (name == "precompiled_charsmap") {  // the edit took: the rule applies
      EXPECT_EQ(tok.encode("\xef\xbd\x86"), tok.encode("f"));
    }
  }
}

TEST(SentencePieceTokenizer, ContinuationsGetNoDummyPrefixAsInHuggingFace) {
  // continuation.json: the slow LlamaTokenizer's ids (make_continuation_cases.py); a completion
  // is the text after its prompt, tokenized with add_prefix_space=False.
  const auto tok = load_tokenizer(kTokenizers + "/sentencepiece");
  const json ref = json::parse(read_file(kTokenizers + "/continuation.json"));
  ASSERT_GE(ref.at("cases").size(), 10u);
  testing::TempDir dir;
  std::filesystem::copy_file(kTokenizers + "/sentencepiece/tokenizer.model", dir.file("tokenizer.model"));
  json config = json::parse(read_file(kTokenizers + "/sentencepiece/tokenizer_config.json"));
  config["legacy"] = true;
  write_file(dir.file("tokenizer_config.json"), config.dump());
  const auto legacy = load_tokenizer(dir.path());
  int differ = 0;
  for (const json& c : ref.at("cases")) {
    const std::string prompt = c.at("prompt"), completion = c.at("completion");
    const Ids p = c.at("prompt_ids").get<Ids>(), cont = c.at("completion_ids").get<Ids>();
    EXPECT_EQ(tok->encode(prompt), p) << json(prompt).dump();
    EXPECT_EQ(tok->encode_continuation(completion), cont) << json(completion).dump();
    Ids both = p;
    both.insert(both.end(), cont.begin(), cont.end());
    EXPECT_EQ(tok->decode(both), prompt + completion);
    differ += tok->encode(completion) != cont;
    // Legacy mode has the same rule for the first run of a continuation.
    Ids l = legacy->encode(prompt);
    const Ids lc = legacy->encode_continuation(completion);
    l.insert(l.end(), lc.begin(), lc.end());
    EXPECT_EQ(legacy->decode(l), prompt + completion) << json(prompt + completion).dump();
  }
  EXPECT_GT(differ, 0);
  // Runs after a special token are encoded as encode() does: legacy mode gives them the prefix.
  EXPECT_EQ(legacy->encode_continuation("x</s>  y"), (Ids{430, 2, 262, 395, 417}));
  EXPECT_EQ(legacy->encode_continuation("<s>hi</s>"), legacy->encode("<s>hi</s>"));
  EXPECT_TRUE(tok->encode_continuation("").empty());
}

TEST(SentencePieceTokenizer, WithoutAPrefixSpaceTheSpaceBeforeALeadingSpecialTokenIsDropped) {
  // add_prefix_space=false in tokenizer_config.json; ids from the slow LlamaTokenizer.
  testing::TempDir dir;
  std::filesystem::copy_file(kTokenizers + "/sentencepiece/tokenizer.model", dir.file("tokenizer.model"));
  json config = json::parse(read_file(kTokenizers + "/sentencepiece/tokenizer_config.json"));
  config["add_prefix_space"] = false;
  write_file(dir.file("tokenizer_config.json"), config.dump());
  const auto tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->encode(" 4"), (Ids{395, 435}));
  EXPECT_EQ(tok->encode("4"), (Ids{435}));
  EXPECT_EQ(tok->encode(" <s> x"), (Ids{1, 395, 430}));
  // A continuation keeps that space: text came before it.
  EXPECT_EQ(tok->encode_continuation(" <s> x"), (Ids{395, 1, 395, 430}));
}

TEST(SentencePieceTokenizer, WithoutAConfigOnlyUnknownBosAndEosAreSplitOff) {
  // As LlamaTokenizer's defaults: another control piece (Mistral v3's [INST]) written in the
  // text is text, so the model with one added gives the ids of the model without it.
  testing::TempDir dir;
  // One more piece: "[INST]", type CONTROL (3).
  write_file(dir.file("tokenizer.model"), patched_model(proto_bytes(1, proto_bytes(1, "[INST]") + proto_varint(3, 3))));
  const SentencePieceTokenizer with_inst(dir.file("tokenizer.model"));
  const SentencePieceTokenizer plain(kTokenizers + "/sentencepiece/tokenizer.model");
  ASSERT_EQ(with_inst.vocab_size(), plain.vocab_size() + 1);
  const int32_t inst = static_cast<int32_t>(plain.vocab_size());
  for (const std::string s : {"[INST] hi [/INST]", "<s>[INST]x</s>", "a <unk> [INST]"}) {
    const Ids ids = with_inst.encode(s);
    EXPECT_EQ(ids, plain.encode(s)) << s;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), inst), 0) << s;
    EXPECT_EQ(with_inst.decode(ids), s);
  }
  const Ids ids = with_inst.encode("<s>x</s><unk>");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ(ids.back(), 0);
}

TEST(Tokenizer, ByteLevelContinuationsAreTheirEncoding) {
  const json& strings = cases().at("strings");
  for (const char* folder : {"bpe-gpt2", "bpe-llama3"}) {
    const auto tok = load_tokenizer(kTokenizers + "/" + folder);
    for (const auto& s : strings) EXPECT_EQ(tok->encode_continuation(s.get<std::string>()), tok->encode(s.get<std::string>()));
  }
  const ByteTokenizer bytes;
  EXPECT_EQ(bytes.encode_continuation(" 4\xff"), (Ids{32, 52, 255}));
}

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

TEST(LoadTokenizer, ByteIsTheDefault) {
  for (const std::string name : {"", "byte"}) {
    const auto tok = load_tokenizer(name);
    EXPECT_EQ(tok->kind(), "byte");
    EXPECT_EQ(tok->vocab_size(), ByteTokenizer::kVocabSize);
    EXPECT_FALSE(tok->eos_id().has_value());
    EXPECT_FALSE(tok->bos_id().has_value());
    EXPECT_EQ(tok->encode("A\xff"), (Ids{65, 255}));  // any bytes: no UTF-8 check
  }
}

TEST(LoadTokenizer, AFolderWithoutTokenizerFilesIsNamedWithWhatWasLookedFor) {
  testing::TempDir dir;
  write_file(dir.file("config.json"), "{}");
  const std::string message = data_error([&] { load_tokenizer(dir.path()); });
  EXPECT_NE(message.find(dir.path()), std::string::npos) << message;
  for (const char* f : {"tokenizer.model", "tokenizer.json", "vocab.json", "merges.txt"})
    EXPECT_NE(message.find(f), std::string::npos) << message;
  const std::string missing = data_error([&] { load_tokenizer(dir.file("nope")); });
  EXPECT_NE(missing.find(dir.file("nope")), std::string::npos) << missing;
}

TEST(LoadTokenizer, CorruptFilesAreDataErrorsNamingTheFile) {
  testing::TempDir dir;
  const std::string json_text = read_file(kTokenizers + "/bpe-llama3/tokenizer.json");
  write_file(dir.file("tokenizer.json"), json_text.substr(0, json_text.size() / 2));
  std::string message = data_error([&] { load_tokenizer(dir.path()); });
  EXPECT_NE(message.find(dir.file("tokenizer.json")), std::string::npos) << message;

  testing::TempDir sp;
  const std::string model = read_file(kTokenizers + "/sentencepiece/tokenizer.model");
  write_file(sp.file("tokenizer.model"), model.substr(0, model.size() / 3));
  message = data_error([&] { load_tokenizer(sp.path()); });
  EXPECT_NE(message.find(sp.file("tokenizer.model")), std::string::npos) << message;
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
