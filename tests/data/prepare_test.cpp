// Preparation: the shards reproduce the input exactly, split train/val from the end, carry
// metadata, and a second run with the same parameters reuses the directory. JSON Lines, loss
// masks and real tokenizers are tested in prepare_jsonl_test.cpp.
#include "data/prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "data/markov_corpus.h"
#include "tests/data/prepare_test_helpers.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;
using ::feast::testing::bytes_of;

std::string sample_text(size_t n, int salt) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>((i * 131 + salt) % 256));
  return s;
}

TEST(Prepare, TextShardsConcatenateToTheInput) {
  TempDir dir;
  const std::string a = sample_text(700, 1), b = sample_text(300, 2);
  std::ofstream(dir.file("a.txt"), std::ios::binary) << a;
  std::ofstream(dir.file("b.txt"), std::ios::binary) << b;
  PrepareOptions o{dir.file("out"), 0.1, 250, false, /*keep_binary=*/true};

  const PreparedData d = prepare_text({dir.file("a.txt"), dir.file("b.txt")}, o);
  EXPECT_FALSE(d.reused);
  EXPECT_EQ(d.train_tokens, 900);
  EXPECT_EQ(d.val_tokens, 100);
  ASSERT_EQ(d.train_shards.size(), 4u);  // 250 + 250 + 250 + 150
  EXPECT_EQ(d.train_shards[0], dir.file("out/train_000.bin"));
  EXPECT_EQ(d.val_shards, std::vector<std::string>{dir.file("out/val_000.bin")});
  EXPECT_EQ(bytes_of(d.train_shards) + bytes_of(d.val_shards), a + b);
  EXPECT_EQ(Dataset(dir.file("out/train_*.bin")).total_tokens(), 900);
  EXPECT_FALSE(d.entropy_floor.has_value());

  std::ifstream meta_file(dir.file("out/meta.json"));
  const auto meta = nlohmann::json::parse(meta_file);
  EXPECT_EQ(meta.at("tokenizer"), "byte");
  EXPECT_EQ(meta.at("vocab_size"), 256);
  EXPECT_EQ(meta.at("shard_version"), 1);
  EXPECT_EQ(meta.at("train").at("tokens"), 900);
  EXPECT_EQ(meta.at("val").at("tokens"), 100);
}

TEST(Prepare, SameParametersReuseOtherwiseRewrite) {
  TempDir dir;
  std::ofstream(dir.file("a.txt"), std::ios::binary) << sample_text(1000, 3);
  PrepareOptions o{dir.file("out"), 0.1, 250, false, /*keep_binary=*/true};
  prepare_text({dir.file("a.txt")}, o);

  const PreparedData again = prepare_text({dir.file("a.txt")}, o);
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(again.train_tokens, 900);
  EXPECT_EQ(again.train_shards.size(), 4u);

  o.force = true;
  EXPECT_FALSE(prepare_text({dir.file("a.txt")}, o).reused);

  // New parameters rewrite, and the old run's extra shards do not linger for the glob to find.
  o.force = false;
  o.max_shard_tokens = 1000;
  const PreparedData bigger = prepare_text({dir.file("a.txt")}, o);
  EXPECT_FALSE(bigger.reused);
  EXPECT_EQ(bigger.train_shards.size(), 1u);
  EXPECT_EQ(resolve_shard_paths(dir.file("out/train_*.bin")).size(), 1u);

  // A deleted shard makes the directory incomplete: it is rebuilt, not reused.
  std::filesystem::remove(dir.file("out/val_000.bin"));
  EXPECT_FALSE(prepare_text({dir.file("a.txt")}, o).reused);
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/val_000.bin")));
}

TEST(Prepare, AnInputEditedInPlaceIsPreparedAgain) {
  TempDir dir;
  const std::string text = sample_text(1000, 3);
  std::ofstream(dir.file("a.txt"), std::ios::binary) << text;
  PrepareOptions o{dir.file("out"), 0.1, 250, false, /*keep_binary=*/true};
  prepare_text({dir.file("a.txt")}, o);
  const auto mtime = std::filesystem::last_write_time(dir.file("a.txt"));
  // The same size and modification time, other content: only the checksum can tell.
  std::string edited = text;
  edited[10] = edited[10] == 'x' ? 'y' : 'x';
  std::ofstream(dir.file("a.txt"), std::ios::binary | std::ios::trunc) << edited;
  std::filesystem::last_write_time(dir.file("a.txt"), mtime);
  const PreparedData d = prepare_text({dir.file("a.txt")}, o);
  EXPECT_FALSE(d.reused) << "stale shards were kept for an edited input";
  EXPECT_EQ(bytes_of(d.train_shards) + bytes_of(d.val_shards), edited);
}

TEST(Prepare, InputsThatAreNotTextAreSkippedAndCounted) {
  TempDir dir;
  std::ofstream(dir.file("a.txt"), std::ios::binary) << std::string(1000, 'a');
  std::ofstream(dir.file("prog"), std::ios::binary) << std::string("\x7f" "ELF\0\0\x01\x02", 8) << "rest";
  std::ofstream(dir.file("latin1.txt"), std::ios::binary) << std::string("caf\xe9 cr\xe8me ", 11) + "abc";
  PrepareOptions o{dir.file("out"), 0.1, 100'000, false};
  const PreparedData d = prepare_text({dir.file("a.txt"), dir.file("prog"), dir.file("latin1.txt")}, o);
  EXPECT_EQ(d.files_kept, 2);
  EXPECT_EQ(d.files_skipped, 1);
  ASSERT_EQ(d.input_notes.size(), 2u);
  EXPECT_NE(d.input_notes[0].find("prog: skipped, not text: 2 NUL byte(s)"), std::string::npos) << d.input_notes[0];
  // --keep-binary keeps it, and says so.
  PrepareOptions keep{dir.file("out_all"), 0.1, 100'000, false, /*keep_binary=*/true};
  const PreparedData all = prepare_text({dir.file("prog")}, keep);
  EXPECT_EQ(all.files_kept, 1);
  EXPECT_EQ(all.train_tokens + all.val_tokens, 12);
  EXPECT_NE(d.input_notes[1].find("latin1.txt: kept, but 2 of its 14 bytes are not valid UTF-8"), std::string::npos)
      << d.input_notes[1];
  EXPECT_EQ(d.train_tokens + d.val_tokens, 1000 + 14);
  EXPECT_THROW(prepare_text({dir.file("prog")}, PrepareOptions{dir.file("out2"), 0.1, 100'000, false}), DataError);
}

TEST(Prepare, SyntheticRecordsTheEntropyFloor) {
  TempDir dir;
  PrepareOptions o{dir.file("syn"), 0.05, 100'000'000, false};
  const PreparedData d = prepare_synthetic(20'000, 4, o);
  EXPECT_EQ(d.train_tokens, 19'000);
  EXPECT_EQ(d.val_tokens, 1'000);
  const MarkovCorpus corpus(4);
  EXPECT_EQ(bytes_of(d.train_shards) + bytes_of(d.val_shards), corpus.generate(20'000));
  ASSERT_TRUE(d.entropy_floor.has_value());
  EXPECT_DOUBLE_EQ(*d.entropy_floor, corpus.entropy_rate());
  // The floor on the validation split itself: the chain's score of its 1,000 tokens.
  ASSERT_TRUE(d.val_floor.has_value() && d.val_floor_stddev.has_value());
  const MarkovCorpus::Score val = corpus.score(corpus.generate(20'000), 19'000);
  EXPECT_DOUBLE_EQ(*d.val_floor, val.mean);
  EXPECT_DOUBLE_EQ(*d.val_floor_stddev, val.stddev);

  const PreparedData again = prepare_synthetic(20'000, 4, o);
  EXPECT_TRUE(again.reused);
  ASSERT_TRUE(again.entropy_floor.has_value());
  EXPECT_DOUBLE_EQ(*again.entropy_floor, corpus.entropy_rate());
  EXPECT_EQ(again.val_floor, d.val_floor);
  EXPECT_FALSE(prepare_synthetic(20'000, 5, o).reused);
}

TEST(Prepare, MissingInputNamesThePath) {
  TempDir dir;
  const std::string missing = dir.file("missing.txt");
  try {
    prepare_text({missing}, PrepareOptions{dir.file("out")});
    FAIL() << "a missing input was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/meta.json")));
}

TEST(Prepare, RejectsBadOptions) {
  TempDir dir;
  std::ofstream(dir.file("a.txt")) << "hello world";
  EXPECT_THROW(prepare_text({dir.file("a.txt")}, PrepareOptions{dir.file("o"), 1.0}), Error);
  EXPECT_THROW(prepare_text({dir.file("a.txt")}, PrepareOptions{dir.file("o"), 0.0}), Error);
  EXPECT_THROW(prepare_text({dir.file("a.txt")}, PrepareOptions{"", 0.1}), Error);
  std::ofstream(dir.file("one.txt")) << "x";
  EXPECT_THROW(prepare_text({dir.file("one.txt")}, PrepareOptions{dir.file("o"), 0.5}), DataError);
}

TEST(Prepare, SyntheticTokensAboveTheBoundAreRefusedNamingTheFlag) {
  TempDir dir;
  try {
    prepare_synthetic(99'999'999'999'999, 1, PrepareOptions{dir.file("syn")});
    FAIL() << "--tokens 99999999999999 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tokens must be at most " + std::to_string(kMaxSyntheticTokens)),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("syn")));
}

TEST(Prepare, AnOutputPathThatCannotBeADirectoryNamesOut) {
  TempDir dir;
  std::ofstream(dir.file("a.txt")) << "hello world, hello world";
  for (const std::string& out : {dir.file("a.txt"), dir.file("a.txt/sub")}) {
    std::string msg = "(no error)";
    try {
      prepare_text({dir.file("a.txt")}, PrepareOptions{out, 0.5});
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("prepare-data: --out " + out), std::string::npos) << msg;
    EXPECT_EQ(msg.find("filesystem error"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace feast
