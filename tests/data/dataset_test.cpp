// Dataset: a file, a directory or a glob resolve to the same sorted shard list; nothing to read
// is an error that says how to create data; a damaged meta.json, or one recording a larger
// vocabulary than the limit, is named; check_vocab finds out-of-range ids.
#include "data/dataset.h"

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/sampler.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;

std::vector<int32_t> iota(int n, int start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// train_000 (10 tokens), train_001 (20), val_000 (5) and a stray non-shard file.
void make_split(const TempDir& dir) {
  write_shard(dir.file("train_001.bin"), iota(20, 100), TokenWidth::u16);
  write_shard(dir.file("train_000.bin"), iota(10, 0), TokenWidth::u16);
  write_shard(dir.file("val_000.bin"), iota(5, 200), TokenWidth::u32);
  std::ofstream(dir.file("notes.txt")) << "not a shard";
}

TEST(Dataset, GlobMatchesSortedShards) {
  TempDir dir;
  make_split(dir);
  Dataset d(dir.file("train_*.bin"));
  ASSERT_EQ(d.num_shards(), 2u);
  EXPECT_EQ(d.shard(0).path(), dir.file("train_000.bin"));
  EXPECT_EQ(d.shard(1).path(), dir.file("train_001.bin"));
  EXPECT_EQ(d.total_tokens(), 30);
}

TEST(Dataset, DirectoryTakesEveryBinFile) {
  TempDir dir;
  make_split(dir);
  Dataset d(dir.path());
  ASSERT_EQ(d.num_shards(), 3u);
  EXPECT_EQ(d.shard(2).path(), dir.path() + "/val_000.bin");
  EXPECT_EQ(d.total_tokens(), 35);
}

TEST(Dataset, ADirectoryNamedForASplitTakesOnlyThatSplitsShards) {
  TempDir dir;
  make_split(dir);
  const Dataset train(dir.path(), Split::kTrain), val(dir.path(), Split::kVal);
  ASSERT_EQ(train.num_shards(), 2u);
  EXPECT_EQ(train.total_tokens(), 30);  // not the 35 of every shard
  ASSERT_EQ(val.num_shards(), 1u);
  EXPECT_EQ(val.shard(0).path(), dir.file("val_000.bin"));
}

TEST(Dataset, LlmcsShardNamesAreSplitToo) {
  TempDir dir;
  write_shard(dir.file("fineweb_val_000000.bin"), iota(5, 0), TokenWidth::u16);
  write_shard(dir.file("fineweb_train_000001.bin"), iota(7, 0), TokenWidth::u16);
  write_shard(dir.file("fineweb_train_000002.bin"), iota(9, 0), TokenWidth::u16);
  EXPECT_EQ(Dataset(dir.path(), Split::kTrain).total_tokens(), 16);
  EXPECT_EQ(Dataset(dir.path(), Split::kVal).total_tokens(), 5);
}

TEST(Dataset, ASplitsWordMustStandAloneInTheName) {
  TempDir dir;
  write_shard(dir.file("retrieval_train_000.bin"), iota(7, 0), TokenWidth::u16);
  write_shard(dir.file("retrieval_val_000.bin"), iota(3, 0), TokenWidth::u16);
  EXPECT_EQ(Dataset(dir.path(), Split::kTrain).total_tokens(), 7);  // "retrieval" is not "val"
  EXPECT_EQ(Dataset(dir.path(), Split::kVal).total_tokens(), 3);
}

TEST(Dataset, MetaJsonDecidesWhichShardsBelongToASplit) {
  TempDir dir;
  write_shard(dir.file("a.bin"), iota(4, 0), TokenWidth::u16);
  write_shard(dir.file("b.bin"), iota(6, 0), TokenWidth::u16);
  std::ofstream(dir.file("meta.json")) << R"({"train": {"shards": ["b.bin"]}, "val": {"shards": ["a.bin"]}})";
  EXPECT_EQ(Dataset(dir.path(), Split::kTrain).total_tokens(), 6);
  EXPECT_EQ(Dataset(dir.path(), Split::kVal).total_tokens(), 4);
  EXPECT_EQ(Dataset(dir.path()).total_tokens(), 10);  // no split named: every shard
  std::ofstream(dir.file("meta.json")) << R"({"train": {"shards": ["gone.bin"]}})";
  try {
    Dataset d(dir.path(), Split::kTrain);
    ADD_FAILURE() << "a missing listed shard was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("gone.bin"), std::string::npos) << e.what();
  }
}

std::string open_error(const std::string& pattern, Split split = Split::kAny) {
  try {
    Dataset d(pattern, split);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

TEST(Dataset, AMetaJsonThatDoesNotParseIsNamedNotIgnored) {
  TempDir dir;
  make_split(dir);
  for (const char* damaged : {"{not json", "", "[1, 2]"}) {
    std::ofstream(dir.file("meta.json")) << damaged;
    // Whether it would pick the split's shards (a directory) or record masks (any pattern).
    for (const std::string& msg :
         {open_error(dir.path(), Split::kTrain), open_error(dir.file("train_*.bin")), open_error(dir.path())}) {
      EXPECT_NE(msg.find(dir.file("meta.json") + ": "), std::string::npos) << damaged << ": " << msg;
      EXPECT_NE(msg.find("re-run that with --force"), std::string::npos) << msg;
    }
  }
  EXPECT_NE(open_error(dir.path()).find("a JSON array, not an object"), std::string::npos);
  std::ofstream(dir.file("meta.json")) << "{not json";
  EXPECT_NE(open_error(dir.path()).find("not valid JSON (parse error at line 1"), std::string::npos);
}

TEST(Dataset, AMetaJsonVocabularyLargerThanTheLimitIsRefusedAtOnce) {
  TempDir dir;
  make_split(dir);
  std::ofstream(dir.file("meta.json")) << R"({"vocab_size": 50257})";
  Dataset d(dir.file("train_*.bin"));
  try {
    d.set_vocab_limit(256, "model.vocab_size");
    FAIL() << "meta.json's vocab_size 50257 was accepted under model.vocab_size 256";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.file("meta.json") + " records vocab_size 50257, larger than model.vocab_size 256"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("set model.vocab_size to at least 50257"), std::string::npos) << msg;
  }
  // Equal or smaller (a model's padded vocabulary) is fine, and so is no limit.
  EXPECT_NO_THROW(d.set_vocab_limit(50257, "model.vocab_size"));
  EXPECT_NO_THROW(d.set_vocab_limit(50304, "model.vocab_size"));
  EXPECT_NO_THROW(d.set_vocab_limit(0));
}

TEST(Dataset, SingleFile) {
  TempDir dir;
  make_split(dir);
  Dataset d(dir.file("val_000.bin"));
  ASSERT_EQ(d.num_shards(), 1u);
  EXPECT_EQ(d.total_tokens(), 5);
}

TEST(Dataset, ReadsWindowsWithinAShardOnly) {
  TempDir dir;
  make_split(dir);
  Dataset d(dir.file("train_*.bin"));
  std::vector<int32_t> out(4);
  d.read(1, 16, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{116, 117, 118, 119}));
  EXPECT_THROW(d.read(0, 8, 4, out.data()), DataError);  // would run into train_001
  EXPECT_THROW(d.read(2, 0, 1, out.data()), DataError);
}

TEST(Dataset, EmptyGlobNamesPatternAndFix) {
  TempDir dir;
  const std::string pattern = dir.file("train_*.bin");
  try {
    Dataset d(pattern);
    FAIL() << "an empty glob opened";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(pattern), std::string::npos) << msg;
    EXPECT_NE(msg.find("trainer prepare-data"), std::string::npos) << msg;
  }
}

TEST(Dataset, DirectoryWithoutShardsIsAnError) {
  TempDir dir;
  std::ofstream(dir.file("notes.txt")) << "x";
  EXPECT_THROW(resolve_shard_paths(dir.path()), DataError);
}

TEST(Dataset, CorruptShardInTheSplitIsReported) {
  TempDir dir;
  make_split(dir);
  std::ofstream(dir.file("train_002.bin")) << "junk";
  try {
    Dataset d(dir.file("train_*.bin"));
    FAIL() << "a corrupt shard was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("train_002.bin")), std::string::npos);
  }
}

TEST(Dataset, CheckVocabReportsShardAndId) {
  TempDir dir;
  write_shard(dir.file("a.bin"), std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  write_shard(dir.file("b.bin"), std::vector<int32_t>{4, 300, 5}, TokenWidth::u16);
  Dataset d(dir.path());
  EXPECT_NO_THROW(d.check_vocab(301));
  try {
    d.check_vocab(256);
    FAIL() << "id 300 passed a vocabulary of 256";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shard " + dir.file("b.bin") + " contains token id 300 >= "
                       "model.vocab_size 256 (token 1)"),
              std::string::npos)
        << msg;
  }
}

TEST(Dataset, AVocabularyLimitChecksEachWindowRead) {
  TempDir dir;
  write_shard(dir.file("a.bin"), std::vector<int32_t>{1, 2, 3, 4, 5, 6}, TokenWidth::u16);
  write_shard(dir.file("b.bin"), std::vector<int32_t>{4, 5, 6, 300, 7, 8}, TokenWidth::u16);
  Dataset d(dir.path());
  std::vector<int32_t> out(3);
  d.read(1, 0, 3, out.data());  // no limit yet: anything reads
  d.set_vocab_limit(256, "model.vocab_size");
  std::vector<int32_t> six(6);
  d.read(0, 0, 6, six.data());
  d.read(1, 0, 3, out.data());  // the window before the bad id is fine
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 6}));
  try {
    d.read(1, 2, 3, out.data());
    FAIL() << "id 300 was read under a limit of 256";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.file("b.bin") + ": token 3 has id 300, outside the vocabulary of 256 ids "
                       "(model.vocab_size)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("trainer check-data " + dir.path() + " --vocab-size 256"), std::string::npos) << msg;
  }
  // Samplers read through the same check.
  ValSampler v(d, 2);
  std::vector<int32_t> in(4), tg(4);
  EXPECT_NO_THROW(v.fill(0, 2, in.data(), tg.data()));  // windows of a.bin
  EXPECT_THROW(v.fill(3, 2, in.data(), tg.data()), DataError);  // window 3: b.bin's tokens [2, 5) hold 300
  d.set_vocab_limit(0);
  EXPECT_NO_THROW(d.read(1, 2, 3, out.data()));
}

TEST(Dataset, ScanFindsTheLargestIdAndTheFirstOutOfRange) {
  TempDir dir;
  std::vector<int32_t> big(70'000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = int32_t(i % 1000);
  big[65'000] = 70'000;
  big[66'000] = 69'999;
  write_shard(dir.file("a.bin"), std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  write_shard(dir.file("b.bin"), big, TokenWidth::u32);
  write_shard(dir.file("c.bin"), std::vector<int32_t>{80'000}, TokenWidth::u32);
  Dataset d(dir.path());
  for (int threads : {1, 3}) {
    const DatasetScan all = d.scan(0, threads);
    EXPECT_EQ(all.tokens, 70'004);
    EXPECT_EQ(all.max_id, 80'000);
    EXPECT_FALSE(all.problem.has_value());
    const DatasetScan limited = d.scan(50'000, threads);
    ASSERT_TRUE(limited.problem.has_value());
    EXPECT_EQ(*limited.problem, dir.file("b.bin") + ": token 65000 has id 70000 >= the vocabulary size 50000");
    EXPECT_EQ(limited.max_id, 80'000);
    EXPECT_FALSE(d.scan(80'001, threads).problem.has_value());
  }
}

}  // namespace
}  // namespace feast
