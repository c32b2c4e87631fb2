// The data verbs' command lines: `prepare-data` expands its globs and takes a tokenizer;
// `check-data` reads every shard, prints a summary, and names the first bad shard and offset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "data/loss_mask.h"
#include "data/shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/run_verb.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;

const std::string kGpt2 = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf/tokenizers/bpe-gpt2";

int prepare_data_command(std::vector<std::string> args) { return testing::run_verb("prepare-data", std::move(args)); }
int check_data_command(std::vector<std::string> args) { return testing::run_verb("check-data", std::move(args)); }

// The command's exit code and what it printed on stdout.
std::pair<int, std::string> run(const std::function<int()>& command) {
  ::testing::internal::CaptureStdout();
  int code = -1;
  try {
    code = command();
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  return {code, ::testing::internal::GetCapturedStdout()};
}

std::string error_of(const std::function<int()>& command) {
  try {
    run(command);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void write_corpus(const TempDir& dir) {
  std::ofstream(dir.file("a.jsonl")) << R"({"prompt": "Q: hello?", "completion": " hello world"})" << "\n"
                                     << R"({"text": "don't you'll I'm. Hello World!"})" << "\n";
  std::ofstream(dir.file("b.jsonl")) << R"({"text": "hello  world  1234567890 3.14159"})" << "\n";
}

TEST(PrepareDataCommand, ExpandsGlobsAndUsesTheTokenizer) {
  TempDir dir;
  write_corpus(dir);
  const auto [code, out] = run([&] {
    return prepare_data_command({"--tokenizer", kGpt2, "--out", dir.file("out"), "--val-fraction", "0.3", "--quiet",
                                 "--threads", "2", dir.file("*.jsonl")});
  });
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("prepare-data: 3 documents, 1 of them prompt/completion examples"), std::string::npos) << out;
  EXPECT_NE(out.find("bpe tokenizer (" + kGpt2 + "), vocab 320, end-of-text id 317"), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/train_000.mask")));

  const std::string msg = error_of([&] { return prepare_data_command({"--out", dir.file("o2"), dir.file("*.txt")}); });
  const std::string pattern = dir.file("*.txt");
  EXPECT_NE(msg.find(pattern + "' matches no file"), std::string::npos) << msg;
}

TEST(PrepareDataCommand, RefusesANegativeSeedAndAHugeTokenCountNamingTheFlag) {
  TempDir dir;
  const std::string seed = error_of([&] {
    return prepare_data_command({"--synthetic", "--out", dir.file("out"), "--quiet", "--seed", "-1"});
  });
  EXPECT_NE(seed.find("prepare-data: --seed: expected a whole number >= 0, got '-1'"), std::string::npos) << seed;
  const std::string tokens = error_of([&] {
    return prepare_data_command({"--synthetic", "--out", dir.file("out"), "--quiet", "--tokens", "99999999999999"});
  });
  EXPECT_NE(tokens.find("prepare-data: --tokens must be at most"), std::string::npos) << tokens;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST(CheckDataCommand, SummarisesSoundData) {
  TempDir dir;
  write_corpus(dir);
  run([&] {
    return prepare_data_command(
        {"--tokenizer", kGpt2, "--out", dir.file("out"), "--quiet", dir.file("a.jsonl"), dir.file("b.jsonl")});
  });
  // The vocabulary size comes from meta.json when not given.
  const auto [code, out] = run([&] { return check_data_command({dir.file("out")}); });
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("check-data: 2 shards, "), std::string::npos) << out;
  EXPECT_NE(out.find("(llm.c GPT-2 (magic 20240520, version 1, uint16 tokens))"), std::string::npos) << out;
  EXPECT_NE(out.find("largest id 317 < vocabulary size 320 (from " + dir.file("out") + "/meta.json)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("check-data: loss masks on every shard: "), std::string::npos) << out;
  EXPECT_NE(out.find("check-data: ok"), std::string::npos) << out;
  const auto [split_code, split_out] =
      run([&] { return check_data_command({dir.file("out"), "--split", "val", "--tokenizer", kGpt2}); });
  EXPECT_EQ(split_code, 0);
  EXPECT_NE(split_out.find("check-data: 1 shard, "), std::string::npos) << split_out;
  EXPECT_NE(split_out.find("(from the tokenizer " + kGpt2 + ")"), std::string::npos) << split_out;
}

TEST(CheckDataCommand, NamesTheFirstOutOfRangeIdAndItsOffset) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  write_shard(dir.file("train_001.bin"), std::vector<int32_t>{4, 5, 260, 6, 300}, TokenWidth::u16);
  const std::string msg = error_of([&] { return check_data_command({dir.file("train_*.bin"), "--vocab-size", "256"}); });
  EXPECT_NE(msg.find("check-data: " + dir.file("train_001.bin") + ": token 2 has id 260 >= the vocabulary size 256 "
                     "(from --vocab-size)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(run([&] { return check_data_command({dir.file("train_*.bin"), "--vocab-size", "301"}); }).first, 0);
  // With nothing to check against, the largest id is still reported.
  const auto [code, out] = run([&] { return check_data_command({dir.file("train_*.bin")}); });
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("largest id 300; no vocabulary size to check it against"), std::string::npos) << out;
}

TEST(CheckDataCommand, ReportsBadMasksAndHeaders) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  write_loss_mask(dir.file("train_000.mask"), std::vector<uint8_t>{0, 1});
  std::string msg = error_of([&] { return check_data_command({dir.file("train_000.bin")}); });
  EXPECT_NE(msg.find(dir.file("train_000.mask") + ": holds 2 entries but its token shard " +
                     dir.file("train_000.bin") + " holds 3 tokens"),
            std::string::npos)
      << msg;
  std::ofstream(dir.file("train_000.bin"), std::ios::app) << "xx";
  msg = error_of([&] { return check_data_command({dir.file("train_000.bin")}); });
  EXPECT_NE(msg.find(dir.file("train_000.bin") + ": 2 trailing bytes"), std::string::npos) << msg;
}

TEST(CheckDataCommand, RefusesWhatTrainingRefusesAtStartUp) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>{1, 2, 3, 4}, TokenWidth::u16);
  write_loss_mask(dir.file("train_000.mask"), std::vector<uint8_t>{0, 0, 0, 0});
  std::string msg = error_of([&] { return check_data_command({dir.path()}); });
  EXPECT_NE(msg.find("check-data: every target in " + dir.path() + " is masked"), std::string::npos) << msg;

  std::filesystem::remove(dir.file("train_000.mask"));
  std::ofstream(dir.file("meta.json")) << R"({"vocab_size": 50257})";
  msg = error_of([&] { return check_data_command({dir.path(), "--vocab-size", "256"}); });
  EXPECT_NE(msg.find("check-data: " + dir.file("meta.json") + " records vocab_size 50257, larger than --vocab-size 256"),
            std::string::npos)
      << msg;
  EXPECT_EQ(run([&] { return check_data_command({dir.path()}); }).first, 0);  // against meta.json's own size

  std::ofstream(dir.file("meta.json")) << "{\"vocab_size\": ";  // cut short
  msg = error_of([&] { return check_data_command({dir.path()}); });
  EXPECT_NE(msg.find("check-data: " + dir.file("meta.json") + ": not valid JSON"), std::string::npos) << msg;
}

TEST(CheckDataCommand, AnswersHelpAndRejectsBadFlags) {
  const auto [code, out] = run([] { return check_data_command({"--help"}); });
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("usage: trainer check-data PATTERN"), std::string::npos) << out;
  EXPECT_NE(error_of([] { return check_data_command({}); }).find("name the shards to check"), std::string::npos);
  EXPECT_NE(error_of([] { return check_data_command({"x", "--split", "test"}); })
                .find("check-data: --split: expected train or val, got 'test'"),
            std::string::npos);
  const std::string typo = error_of([] { return check_data_command({"x", "--vocab-sise", "5"}); });
  EXPECT_NE(typo.find("check-data: unknown option '--vocab-sise'; did you mean '--vocab-size'?"), std::string::npos)
      << typo;
  EXPECT_NE(error_of([] { return check_data_command({"x", "--vocab-size", "5", "--tokenizer", "t"}); })
                .find("not both"),
            std::string::npos);
}

}  // namespace
}  // namespace feast
