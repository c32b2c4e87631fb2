// SentencePiece (tokenizer.model, Llama-2 style) against the slow LlamaTokenizer: special tokens,
// legacy mode, chunked encoding of long texts, continuations, and edited fixture models.
#include "data/tokenizer/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "tests/data/tokenizer/tokenizer_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using nlohmann::json;
using namespace ::feast::testing;  // tokenizer_test_helpers.h

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

}  // namespace
}  // namespace feast
