// Preparation of JSON Lines documents and prompt/completion examples with their loss masks,
// gzip inputs, globs and threads, and Hugging Face tokenizers (GPT-2's BPE, SentencePiece).
#include "data/prepare.h"

#include <gtest/gtest.h>

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "data/loss_mask.h"
#include "data/sampler.h"
#include "data/tokenizer/tokenizer.h"
#include "tests/data/prepare_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;
using ::feast::testing::bytes_of;

// ---------------------------------------------------------------------------------------------
// Tokenizers, JSON Lines and loss masks

const std::string kGpt2 = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/tokenizers/bpe-gpt2";

std::vector<int32_t> tokens_of(const std::vector<std::string>& shards) {
  std::vector<int32_t> out;
  for (const auto& path : shards) {
    const Shard s(path);
    const size_t at = out.size();
    out.resize(at + size_t(s.size()));
    s.read(0, s.size(), out.data() + at);
  }
  return out;
}

std::vector<uint8_t> masks_of(const std::vector<std::string>& shards) {
  std::vector<uint8_t> out;
  for (const auto& path : shards) {
    const Shard s(path);
    const LossMask m(loss_mask_path(path), s);
    const auto w = m.window(0, m.size());
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

nlohmann::json meta_of(const std::string& dir) {
  std::ifstream f(dir + "/meta.json");
  return nlohmann::json::parse(f);
}

TEST(PrepareJsonl, TextLinesAreDocumentsConcatenatedByTheByteTokenizer) {
  TempDir dir;
  std::ofstream(dir.file("a.jsonl")) << R"({"text": "hello ", "id": 1})" << "\n\n"
                                     << R"({"text": "wide world", "meta": {"x": [1]}})" << "\r\n"
                                     << R"({"text": "!\u00e9"})";  // no final newline
  const PreparedData d = prepare_text({dir.file("a.jsonl")}, PrepareOptions{dir.file("out"), 0.25, 1000});
  EXPECT_EQ(bytes_of(d.train_shards) + bytes_of(d.val_shards), "hello wide world!\xc3\xa9");
  EXPECT_EQ(d.documents, 3);
  EXPECT_EQ(d.instruction_examples, 0);
  EXPECT_FALSE(d.has_loss_mask);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/train_000.mask")));
  EXPECT_EQ(d.train_tokens, 14);  // the byte tokenizer cuts exactly: 19 - round(19 * 0.25)
  const auto meta = meta_of(dir.file("out"));
  EXPECT_EQ(meta.at("loss_mask"), false);
  EXPECT_TRUE(meta.at("eos_id").is_null());
  EXPECT_FALSE(Dataset(dir.file("out"), Split::kTrain).has_loss_mask());
}

TEST(PrepareJsonl, PromptTokensAreMaskedCompletionTokensAreNot) {
  TempDir dir;
  std::ofstream(dir.file("sft.jsonl")) << R"({"prompt": "Q: 2+2?", "completion": " 4"})" << "\n"
                                       << R"({"prompt": "Say hi.", "completion": " hi"})" << "\n";
  std::ofstream(dir.file("doc.txt")) << "plain text";
  const PreparedData d =
      prepare_text({dir.file("sft.jsonl"), dir.file("doc.txt")}, PrepareOptions{dir.file("out"), 0.2, 7});
  EXPECT_EQ(bytes_of(d.train_shards) + bytes_of(d.val_shards), "Q: 2+2? 4Say hi. hiplain text");
  ASSERT_TRUE(d.has_loss_mask);
  EXPECT_EQ(d.instruction_examples, 2);
  EXPECT_EQ(d.documents, 3);
  EXPECT_EQ(d.masked_tokens, 7 + 7);
  std::vector<uint8_t> expected;
  for (auto [zeros, ones] : {std::pair{7, 2}, std::pair{7, 3}, std::pair{0, 10}}) {
    expected.insert(expected.end(), size_t(zeros), 0);
    expected.insert(expected.end(), size_t(ones), 1);
  }
  // Several shards per split (7 tokens each): every one has its mask, cut at the same places.
  EXPECT_GT(d.train_shards.size(), 1u);
  auto all = masks_of(d.train_shards);
  const auto val = masks_of(d.val_shards);
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(all, expected);
  const auto meta = meta_of(dir.file("out"));
  EXPECT_EQ(meta.at("loss_mask"), true);
  EXPECT_EQ(meta.at("train").at("masks").size(), d.train_shards.size());
  EXPECT_EQ(meta.at("train").at("masked").get<int64_t>() + meta.at("val").at("masked").get<int64_t>(), 14);
  EXPECT_TRUE(Dataset(dir.file("out"), Split::kTrain).has_loss_mask());
  EXPECT_TRUE(Dataset(dir.file("out"), Split::kVal).has_loss_mask());
}

TEST(PrepareJsonl, ABadLineNamesFileLineAndProblem) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"text": "ok"} trailing)", "not valid JSON"},
      {R"(["text", "a list"])", "a JSON array, not an object"},
      {R"({"body": "x"})", R"(has no "text" field, no "prompt" and "completion" fields and no "messages")"},
      {R"({"messages": [], "text": "x"})", R"(has both "messages" and "text")"},
      {R"({"messages": [{"role": "user", "content": "hi"}]})",
       R"(has "messages" (a conversation), but the tokenizer has no chat template)"},
      {R"({"text": "x", "prompt": "y", "completion": "z"})", R"(has both "text" and "prompt")"},
      {R"({"prompt": "y"})", R"(has "prompt" but no "completion")"},
      {R"({"completion": "y"})", R"(has "completion" but no "prompt")"},
      {R"({"text": 17})", R"(field "text" is number, not a string)"},
      {R"({"prompt": "a", "completion": null})", R"(field "completion" is null, not a string)"},
  };
  for (const auto& [line, what] : cases) {
    std::ofstream(dir.file("bad.jsonl"), std::ios::trunc) << R"({"text": "fine"})" << "\n\n" << line << "\n"
                                                          << "{not json either}\n";
    const std::string msg =
        error_of([&] { prepare_text({dir.file("bad.jsonl")}, PrepareOptions{dir.file("out"), 0.1}); });
    EXPECT_NE(msg.find(dir.file("bad.jsonl") + ":3: " + what), std::string::npos) << line << " -> " << msg;
    EXPECT_FALSE(std::filesystem::exists(dir.file("out/meta.json")));
  }
}

// A .json file is an array of the records a .jsonl file holds one per line: read the same way,
// and anything else refused rather than trained on as text (braces, quotes and all).
// Conversations ({"messages": ...}) rendered by the tokenizer folder's chat template: the ids and
// the loss mask are the chat fixture's (transformers' apply_chat_template, only the assistant
// turns counting), nothing follows a conversation but what its template writes, and text lines
// beside them keep their end-of-text token and count whole.
TEST(PrepareJsonl, ConversationsAreRenderedByTheChatTemplateAndOnlyRepliesCount) {
  TempDir dir;
  const std::string folder = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/chat/smollm2";
  const nlohmann::json cases = nlohmann::json::parse(
      std::ifstream(std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/chat/cases.json"))["smollm2"]["conversations"];
  std::ofstream f(dir.file("chat.jsonl"));
  std::vector<int32_t> ids;
  std::vector<uint8_t> counted;
  for (const nlohmann::json& c : cases) {
    f << nlohmann::json{{"messages", c["messages"]}}.dump() << "\n";
    for (int32_t id : c["ids"]) ids.push_back(id);
    for (uint8_t m : c["counted"]) counted.push_back(m);
  }
  f << R"({"text": "plain"})" << "\n";
  f.close();
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(folder);
  for (int32_t id : tok->encode("plain")) ids.push_back(id), counted.push_back(1);
  ids.push_back(*tok->eos_id()), counted.push_back(1);
  PrepareOptions o{dir.file("out"), 0.1};
  o.tokenizer = folder;
  const PreparedData d = prepare_text({dir.file("chat.jsonl")}, o);
  EXPECT_EQ(d.instruction_examples, int64_t(cases.size()));
  EXPECT_EQ(d.documents, int64_t(cases.size()) + 1);
  ASSERT_TRUE(d.has_loss_mask);
  std::vector<int32_t> all = tokens_of(d.train_shards);
  const std::vector<int32_t> val = tokens_of(d.val_shards);
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(all, ids);
  std::vector<uint8_t> masks = masks_of(d.train_shards);
  const std::vector<uint8_t> val_masks = masks_of(d.val_shards);
  masks.insert(masks.end(), val_masks.begin(), val_masks.end());
  EXPECT_EQ(masks, counted);

  // A conversation with no reply, and one the template refuses, are named by line.
  std::ofstream(dir.file("bad.jsonl")) << R"({"messages": [{"role": "user", "content": "hi"}]})" << "\n";
  o.out_dir = dir.file("bad_out");
  std::string msg = error_of([&] { prepare_text({dir.file("bad.jsonl")}, o); });
  EXPECT_NE(msg.find("bad.jsonl:1: a conversation without an assistant turn"), std::string::npos) << msg;
  std::ofstream(dir.file("bad.jsonl"), std::ios::trunc)
      << R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, )"
      << R"({"role": "assistant", "content": "c"}]})" << "\n";
  o.tokenizer = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/chat/mistral";
  msg = error_of([&] { prepare_text({dir.file("bad.jsonl")}, o); });
  EXPECT_NE(msg.find("bad.jsonl:1: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("Conversation roles must alternate"), std::string::npos) << msg;
}

TEST(PrepareJsonl, AJsonArrayIsReadAsRecordsAndAnythingElseIsRefused) {
  TempDir dir;
  std::ofstream(dir.file("sft.json")) << R"([{"prompt": "Q: 2+2?", "completion": " 4"},)" << "\n"
                                      << R"( {"text": "plain text", "id": 3}])";
  std::ofstream(dir.file("sft.jsonl")) << R"({"prompt": "Q: 2+2?", "completion": " 4"})" << "\n"
                                       << R"({"text": "plain text", "id": 3})" << "\n";
  const PreparedData a = prepare_text({dir.file("sft.json")}, PrepareOptions{dir.file("a"), 0.2});
  const PreparedData b = prepare_text({dir.file("sft.jsonl")}, PrepareOptions{dir.file("b"), 0.2});
  EXPECT_EQ(bytes_of(a.train_shards) + bytes_of(a.val_shards), "Q: 2+2? 4plain text");
  EXPECT_EQ(a.instruction_examples, 1);
  EXPECT_EQ(a.documents, 2);
  EXPECT_EQ(masks_of(a.train_shards), masks_of(b.train_shards));
  EXPECT_EQ(a.masked_tokens, b.masked_tokens);

  // An array of texts: each a document, as {"text": ...} would be.
  std::ofstream(dir.file("texts.json")) << R"(["Q: 2+2? 4", "plain text"])";
  const PreparedData t = prepare_text({dir.file("texts.json")}, PrepareOptions{dir.file("t"), 0.2});
  EXPECT_EQ(bytes_of(t.train_shards) + bytes_of(t.val_shards), "Q: 2+2? 4plain text");
  EXPECT_EQ(t.documents, 2);
  EXPECT_EQ(t.instruction_examples, 0);

  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"text": "an object"})", "sft_bad.json: a JSON object, not an array of records; prepare-data reads a .json file"},
      {"plain words, not JSON", "sft_bad.json: not valid JSON; prepare-data reads a .json file as a JSON array"},
      {R"([{"text": "fine"}, {"body": "x"}])", R"(sft_bad.json: record 2: has no "text" field)"},
      {R"(["fine", 3])", "sft_bad.json: record 2: "},
  };
  for (const auto& [content, what] : refused) {
    std::ofstream(dir.file("sft_bad.json"), std::ios::trunc) << content;
    const std::string msg =
        error_of([&] { prepare_text({dir.file("sft_bad.json")}, PrepareOptions{dir.file("c"), 0.2}); });
    EXPECT_NE(msg.find(what), std::string::npos) << content << " -> " << msg;
    EXPECT_FALSE(std::filesystem::exists(dir.file("c/meta.json")));
  }
}

TEST(PrepareJsonl, GzipLinesReadLikePlainOnes) {
  TempDir dir;
  const std::string text = std::string(R"({"prompt": "p", "completion": "c"})") + "\n" + R"({"text": "t"})" + "\n";
  gzFile gz = gzopen(dir.file("a.jsonl.gz").c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, text.data(), unsigned(text.size()));
  gzclose(gz);
  const PreparedData d = prepare_text({dir.file("a.jsonl.gz")}, PrepareOptions{dir.file("out"), 0.3});
  EXPECT_EQ(bytes_of(d.train_shards) + bytes_of(d.val_shards), "pct");
  EXPECT_EQ(masks_of(d.train_shards).front(), 0);
}

TEST(PrepareJsonl, ATruncatedGzipInputIsAnErrorNotHalfACorpus) {
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 4000; ++i) lines += R"({"text": "line )" + std::to_string(i * 7919 % 10007) + R"( of many"})" "\n";
  for (const std::string name : {"a.jsonl.gz", "a.txt.gz"}) {
    const std::string path = dir.file(name);
    gzFile gz = gzopen(path.c_str(), "wb");
    ASSERT_NE(gz, nullptr);
    gzwrite(gz, lines.data(), unsigned(lines.size()));
    gzclose(gz);
    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);  // a download cut short
    const std::string msg = error_of([&] { prepare_text({path}, PrepareOptions{dir.file("out"), 0.1}); });
    EXPECT_NE(msg.find(path + ": is truncated or corrupt (gzip: unexpected end of file after "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("re-download it or re-compress it"), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir.file("out/meta.json")));
  }
}

TEST(PrepareJsonl, InputGlobsExpandSortedAndAnEmptyOneIsNamed) {
  TempDir dir;
  for (const char* name : {"c.txt", "a.txt", "b.txt", "skip.md"}) std::ofstream(dir.file(name)) << name;
  const auto files = expand_input_patterns({dir.file("*.txt"), dir.file("skip.md")});
  EXPECT_EQ(files, (std::vector<std::string>{dir.file("a.txt"), dir.file("b.txt"), dir.file("c.txt"),
                                             dir.file("skip.md")}));
  const std::string msg = error_of([&] { expand_input_patterns({dir.file("a.txt"), dir.file("*.jsonl")}); });
  EXPECT_NE(msg.find("'" + dir.file("*.jsonl") + "' matches no file"), std::string::npos) << msg;
  // A name without glob characters passes through, to be reported when read.
  EXPECT_EQ(expand_input_patterns({dir.file("missing.txt")}), std::vector<std::string>{dir.file("missing.txt")});
}

// A corpus of many documents of different lengths, text and instruction mixed.
void write_mixed_corpus(const TempDir& dir) {
  std::ofstream f(dir.file("mixed.jsonl"));
  for (int i = 0; i < 300; ++i) {
    std::string body;
    for (int k = 0; k <= i % 17; ++k) body += "word" + std::to_string(i * k % 97) + (k % 5 == 4 ? ".\n" : " ");
    if (i % 3 == 0)
      f << nlohmann::json{{"prompt", "Question " + std::to_string(i) + ": "}, {"completion", body}}.dump() << "\n";
    else
      f << nlohmann::json{{"text", body}}.dump() << "\n";
  }
  std::ofstream(dir.file("z.txt")) << "A closing text file.\n";
}

TEST(PrepareJsonl, OutputIsIdenticalAtOneAndTwoThreads) {
  TempDir dir;
  write_mixed_corpus(dir);
  std::vector<std::string> outputs;
  for (int threads : {1, 2}) {
    PrepareOptions o{dir.file("out" + std::to_string(threads)), 0.1, 700};
    o.tokenizer = kGpt2;
    o.threads = threads;
    const PreparedData d = prepare_text({dir.file("mixed.jsonl"), dir.file("z.txt")}, o);
    ASSERT_TRUE(d.has_loss_mask);
    std::string all;
    for (const auto* list : {&d.train_shards, &d.val_shards})
      for (const auto& p : *list) all += read_bytes(p) + read_bytes(loss_mask_path(p));
    outputs.push_back(all);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_GT(outputs[0].size(), 3000u);
}

// Tokens stream to disk a shard at a time and the split is made at the end: small shards must
// hold what one shard holds, cut at the same place, with the masks turned on mid-stream (after
// a text file that fills several shards) matching too, and nothing left over in the directory.
TEST(PrepareJsonl, SmallShardsHoldWhatOneShardHolds) {
  TempDir dir;
  write_mixed_corpus(dir);
  std::string text;
  for (int i = 0; i < 400; ++i) text += "text before the examples " + std::to_string(i) + "\n";
  std::ofstream(dir.file("a.txt")) << text;
  const std::vector<std::string> inputs = {dir.file("a.txt"), dir.file("mixed.jsonl"), dir.file("z.txt")};
  for (double val_fraction : {0.05, 0.5}) {
    PrepareOptions one{dir.file("one"), val_fraction, int64_t{1} << 40};
    one.tokenizer = kGpt2;
    one.force = true;
    const PreparedData whole = prepare_text(inputs, one);
    ASSERT_TRUE(whole.has_loss_mask);
    ASSERT_EQ(whole.train_shards.size(), 1u);
    ASSERT_EQ(whole.val_shards.size(), 1u);
    for (int64_t max_shard : {int64_t{300}, int64_t{7}}) {
      SCOPED_TRACE("val_fraction " + std::to_string(val_fraction) + ", max_shard_tokens " + std::to_string(max_shard));
      PrepareOptions o{dir.file("many"), val_fraction, max_shard};
      o.tokenizer = kGpt2;
      o.force = true;
      const PreparedData d = prepare_text(inputs, o);
      EXPECT_EQ(d.train_tokens, whole.train_tokens);
      EXPECT_EQ(d.val_tokens, whole.val_tokens);
      EXPECT_EQ(d.masked_tokens, whole.masked_tokens);
      EXPECT_GT(d.masked_tokens, 0);
      EXPECT_EQ(tokens_of(d.train_shards), tokens_of(whole.train_shards));
      EXPECT_EQ(tokens_of(d.val_shards), tokens_of(whole.val_shards));
      EXPECT_EQ(masks_of(d.train_shards), masks_of(whole.train_shards));
      EXPECT_EQ(masks_of(d.val_shards), masks_of(whole.val_shards));
      ASSERT_GT(d.train_shards.size(), 2u);
      ASSERT_GT(d.val_shards.size(), 1u);
      for (const auto* list : {&d.train_shards, &d.val_shards}) {
        for (size_t i = 0; i < list->size(); ++i) {
          const int64_t n = Shard((*list)[i]).size();
          if (i + 1 < list->size()) EXPECT_EQ(n, max_shard) << (*list)[i];
          else EXPECT_TRUE(n >= 1 && n <= max_shard) << (*list)[i];
        }
      }
      // meta.json, and a .bin and a .mask per shard: no provisional files stay behind.
      const size_t entries = static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir.file("many")),
                                                               std::filesystem::directory_iterator()));
      EXPECT_EQ(entries, 1 + 2 * (d.train_shards.size() + d.val_shards.size()));
    }
  }
}

TEST(PrepareTokenizer, Gpt2BpeGivesTheTokenizersIdsWithEndOfTextAfterEachDocument) {
  TempDir dir;
  std::ofstream(dir.file("a.jsonl")) << R"({"text": "hello world"})" << "\n"
                                     << R"({"prompt": "Hello World!", "completion": " hello"})" << "\n"
                                     << R"({"text": ""})" << "\n";  // empty: no document, no separator
  std::ofstream(dir.file("b.txt")) << "don't you'll I'm\n";
  PrepareOptions o{dir.file("out"), 0.3};
  o.tokenizer = kGpt2;
  const PreparedData d = prepare_text({dir.file("a.jsonl"), dir.file("b.txt")}, o);
  const auto tok = load_tokenizer(kGpt2);
  ASSERT_EQ(tok->eos_id(), 317);
  const std::vector<int32_t> eos{317};
  const std::vector<int32_t> expected = cat({tok->encode("hello world"), eos, tok->encode("Hello World!"),
                                             tok->encode(" hello"), eos, tok->encode("don't you'll I'm\n"), eos});
  EXPECT_EQ(cat({tokens_of(d.train_shards), tokens_of(d.val_shards)}), expected);
  // Hugging Face's ids (tests/fixtures/hf/tokenizers/cases.json), independent of feast's tokenizer.
  EXPECT_EQ(tok->encode("hello world"), (std::vector<int32_t>{257, 75, 75, 78, 267, 273, 75, 67}));
  // Masks: the prompt's tokens are 0; its completion and the EOS that ends it are 1.
  const size_t prompt = tok->encode("Hello World!").size(), completion = tok->encode(" hello").size();
  std::vector<uint8_t> mask(expected.size(), 1);
  std::fill_n(mask.begin() + 9, prompt, uint8_t{0});
  auto masks = masks_of(d.train_shards);
  const auto val = masks_of(d.val_shards);
  masks.insert(masks.end(), val.begin(), val.end());
  EXPECT_EQ(masks, mask);
  EXPECT_EQ(d.masked_tokens, int64_t(prompt));
  EXPECT_EQ(d.documents, 3);
  EXPECT_EQ(d.tokenizer_kind, "bpe");
  EXPECT_EQ(d.vocab_size, 320);
  EXPECT_EQ(d.eos_id, 317);
  // The split falls at a document start: val begins right after an EOS.
  const size_t n_train = size_t(d.train_tokens);
  EXPECT_EQ(expected[n_train - 1], 317);
  EXPECT_EQ(d.val_tokens, int64_t(tok->encode("don't you'll I'm\n").size()) + 1);
  (void)completion;

  const auto meta = meta_of(dir.file("out"));
  EXPECT_EQ(meta.at("tokenizer"), "bpe");
  EXPECT_EQ(meta.at("tokenizer_folder"), std::filesystem::path(kGpt2).lexically_normal().string());
  EXPECT_EQ(meta.at("vocab_size"), 320);
  EXPECT_EQ(meta.at("eos_id"), 317);
  EXPECT_EQ(meta.at("loss_mask"), true);
  EXPECT_EQ(meta.at("shard_version"), 1);
}

TEST(PrepareTokenizer, SentencePieceCompletionsContinueTheirPromptsWithoutADummyPrefix) {
  // continuation.json: Hugging Face's slow LlamaTokenizer ids of each prompt, and of its completion
  // tokenized as text that follows other text (add_prefix_space=False); the prepared example is
  // exactly those, so it decodes to prompt + completion ({"completion": " 4"} is '▁4', not '▁▁4').
  const std::string folder = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/tokenizers";
  std::ifstream in(folder + "/continuation.json");
  const auto ref = nlohmann::json::parse(in).at("cases");
  ASSERT_GE(ref.size(), 10u);
  TempDir dir;
  std::ofstream f(dir.file("sft.jsonl"));
  for (const auto& c : ref) f << nlohmann::json{{"prompt", c.at("prompt")}, {"completion", c.at("completion")}}.dump() << "\n";
  f << R"({"prompt": "", "completion": " 4"})" << "\n";  // no prompt: the completion starts the text
  f.close();
  PrepareOptions o{dir.file("out"), 0.1};
  o.tokenizer = folder + "/sentencepiece";
  const PreparedData d = prepare_text({dir.file("sft.jsonl")}, o);
  const auto tok = load_tokenizer(o.tokenizer);
  ASSERT_EQ(tok->eos_id(), 2);
  std::vector<int32_t> expected;
  std::vector<uint8_t> mask;
  std::vector<std::string> texts;
  std::vector<size_t> lengths;  // of each example, without its EOS
  for (const auto& c : ref) {
    const auto p = c.at("prompt_ids").get<std::vector<int32_t>>(), comp = c.at("completion_ids").get<std::vector<int32_t>>();
    expected = cat({expected, p, comp, {2}});
    mask.insert(mask.end(), p.size(), 0);
    mask.insert(mask.end(), comp.size() + 1, 1);
    texts.push_back(c.at("prompt").get<std::string>() + c.at("completion").get<std::string>());
    lengths.push_back(p.size() + comp.size());
  }
  expected = cat({expected, {262, 435}, {2}});  // HF: encode(" 4") = '▁▁', '4' with the text's '▁'
  mask.insert(mask.end(), 3, 1);
  texts.push_back(" 4");
  lengths.push_back(2);
  const std::vector<int32_t> got = cat({tokens_of(d.train_shards), tokens_of(d.val_shards)});
  ASSERT_EQ(got, expected);
  auto masks = masks_of(d.train_shards);
  const auto val = masks_of(d.val_shards);
  masks.insert(masks.end(), val.begin(), val.end());
  EXPECT_EQ(masks, mask);
  // Each example, without its EOS, decodes to its prompt followed by its completion.
  size_t start = 0;
  for (size_t k = 0; k < texts.size(); ++k) {
    EXPECT_EQ(tok->decode(std::span(got).subspan(start, lengths[k])), texts[k]) << "example " << k;
    start += lengths[k] + 1;
  }
  EXPECT_EQ(start, got.size());
}

TEST(PrepareTokenizer, AChangedTokenizerFilePreparesAgain) {
  TempDir dir;
  std::filesystem::copy(kGpt2, dir.file("tok"));
  std::ofstream(dir.file("a.txt")) << "hello world, hello world";
  PrepareOptions o{dir.file("out"), 0.2};
  o.tokenizer = dir.file("tok");
  EXPECT_FALSE(prepare_text({dir.file("a.txt")}, o).reused);
  EXPECT_TRUE(prepare_text({dir.file("a.txt")}, o).reused);
  std::ofstream(dir.file("tok/tokenizer_config.json"), std::ios::app) << "\n";
  EXPECT_FALSE(prepare_text({dir.file("a.txt")}, o).reused);
  // The byte tokenizer's directory is not reused for a tokenizer, nor the reverse.
  o.tokenizer = "";
  EXPECT_FALSE(prepare_text({dir.file("a.txt")}, o).reused);
}

TEST(PrepareTokenizer, ProgressReportsEachPhaseToTheEnd) {
  TempDir dir;
  write_mixed_corpus(dir);
  PrepareOptions o{dir.file("out"), 0.1};
  std::vector<PrepareProgress> seen;
  o.on_progress = [&](const PrepareProgress& p) { seen.push_back(p); };
  prepare_text({dir.file("mixed.jsonl"), dir.file("z.txt")}, o);
  const int64_t total = int64_t(std::filesystem::file_size(dir.file("mixed.jsonl")) +
                                std::filesystem::file_size(dir.file("z.txt")));
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(std::string(seen.back().phase), "tokenizing");
  EXPECT_TRUE(seen.back().finished);
  EXPECT_EQ(seen.back().bytes_done, total);
  EXPECT_EQ(seen.back().bytes_total, total);
  EXPECT_GT(seen.back().tokens, 0);
}

TEST(PrepareTokenizer, PreparedMasksReachTheSamplers) {
  TempDir dir;
  write_mixed_corpus(dir);
  PrepareOptions o{dir.file("out"), 0.1, 1500};
  o.tokenizer = kGpt2;
  prepare_text({dir.file("mixed.jsonl")}, o);
  const Dataset data(dir.file("out"), Split::kTrain);
  ASSERT_TRUE(data.has_loss_mask());
  const int T = 16, rows = 8;
  const TrainSampler s(data, 7, T);
  std::vector<int32_t> in(size_t(rows * T)), tg(size_t(rows * T));
  int64_t minus = 0;
  for (int64_t step = 0; step < 10; ++step) {
    s.fill(step, 0, rows, in.data(), tg.data());
    const int64_t ignored = std::count(tg.begin(), tg.end(), -1);
    EXPECT_EQ(s.counted_targets(step, 0, rows), rows * T - ignored);
    minus += ignored;
  }
  EXPECT_GT(minus, 0);  // a third of the examples have prompts
}

}  // namespace
}  // namespace feast
