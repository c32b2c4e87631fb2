// Loss masks: the file format round-trips and is checked against its token shard and for
// entries other than 0 and 1; a split has masks for all shards or none, and not all of its
// targets masked; samplers turn masked targets into -1 and count the rest.
#include "data/loss_mask.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// Shard k of `lengths` holds ids k*1000 + i; its mask is 0 where (i % 3 == 0), so a target's
// id says whether it must come back as -1.
void write_masked_split(const TempDir& dir, const std::vector<int>& lengths) {
  for (size_t k = 0; k < lengths.size(); ++k) {
    std::vector<int32_t> tokens(size_t(lengths[k]));
    std::vector<uint8_t> mask(size_t(lengths[k]));
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = int32_t(k * 1000 + i);
      mask[i] = i % 3 == 0 ? 0 : 1;
    }
    const std::string shard = dir.file("train_00" + std::to_string(k) + ".bin");
    write_shard(shard, tokens, TokenWidth::u32);
    write_loss_mask(loss_mask_path(shard), mask);
  }
}

bool masked(int32_t id) { return (id % 1000) % 3 == 0; }

TEST(LossMask, PathSitsBesideTheShard) {
  EXPECT_EQ(loss_mask_path("d/train_000.bin"), "d/train_000.mask");
  EXPECT_EQ(loss_mask_path("d/shard"), "d/shard.mask");
}

TEST(LossMask, RoundTripsAndHasTheDocumentedLayout) {
  TempDir dir;
  write_shard(dir.file("a.bin"), std::vector<int32_t>{5, 6, 7, 8, 9}, TokenWidth::u16);
  const std::vector<uint8_t> mask{0, 0, 1, 1, 1};
  write_loss_mask(dir.file("a.mask"), mask);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.mask.tmp")));
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.mask")), 1024u + 5u);
  std::ifstream f(dir.file("a.mask"), std::ios::binary);
  int32_t header[256];
  f.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240611);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);
  for (int i = 3; i < 256; ++i) ASSERT_EQ(header[i], 0);

  const Shard shard(dir.file("a.bin"));
  const LossMask m(dir.file("a.mask"), shard);
  EXPECT_EQ(m.size(), 5);
  const auto w = m.window(1, 3);
  EXPECT_EQ(std::vector<uint8_t>(w.begin(), w.end()), (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(m.counted(0, 5), 3);
  EXPECT_EQ(m.counted(0, 2), 0);
  EXPECT_EQ(m.counted_entries(), 3);
  EXPECT_THROW(m.window(3, 3), DataError);
}

TEST(LossMask, WriterRefusesEntriesOtherThanZeroAndOne) {
  TempDir dir;
  const std::string msg = message_of([&] { write_loss_mask(dir.file("a.mask"), std::vector<uint8_t>{1, 2}); });
  EXPECT_NE(msg.find("entry 1 is 2"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.mask")));
}

// A mask file as another tool might write it: any entry values, the header's count right.
void write_raw_mask(const std::string& path, const std::vector<uint8_t>& entries) {
  int32_t header[256] = {kLossMaskMagic, kLossMaskVersion, int32_t(entries.size())};
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(entries.data()), std::streamsize(entries.size()));
}

TEST(LossMask, AnEntryOtherThanZeroAndOneIsRefusedOnOpenNamingFileAndOffset) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>{1, 2, 3, 4, 5}, TokenWidth::u16);
  write_raw_mask(dir.file("train_000.mask"), {1, 0, 1, 2, 7});
  const Shard shard(dir.file("train_000.bin"));
  const std::string msg = message_of([&] { LossMask m(dir.file("train_000.mask"), shard); });
  EXPECT_NE(msg.find(dir.file("train_000.mask") + ": entry 3 is 2; loss-mask entries are 0"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("re-run `trainer prepare-data --force`"), std::string::npos) << msg;
  // A split with it does not open, so training never reads it.
  const std::string via = message_of([&] { Dataset d(dir.path(), Split::kTrain); });
  EXPECT_NE(via.find(dir.file("train_000.mask") + ": entry 3 is 2"), std::string::npos) << via;
}

TEST(LossMask, ASplitWhoseMasksLeaveNoTargetIsRefused) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>(40, 7), TokenWidth::u16);
  write_shard(dir.file("train_001.bin"), std::vector<int32_t>(30, 7), TokenWidth::u16);
  write_loss_mask(dir.file("train_000.mask"), std::vector<uint8_t>(40, 0));
  // Only a first token counts: it is never a target.
  std::vector<uint8_t> first_only(30, 0);
  first_only[0] = 1;
  write_loss_mask(dir.file("train_001.mask"), first_only);
  for (const auto& [split, nothing] : {std::pair{Split::kTrain, "nothing to learn from;"},
                                       std::pair{Split::kVal, "nothing to evaluate;"}}) {
    const std::string pattern = dir.file("train_*.bin");
    const std::string msg = message_of([&] { Dataset d(pattern, split); });
    EXPECT_NE(msg.find("every target in " + pattern + " is masked (its loss masks, e.g. " +
                       dir.file("train_000.mask") + ", are 0 at every target): " + nothing),
              std::string::npos)
        << msg;
  }
  // One counted target is enough.
  std::vector<uint8_t> one(30, 0);
  one[29] = 1;
  write_loss_mask(dir.file("train_001.mask"), one);
  const Dataset d(dir.file("train_*.bin"));
  EXPECT_EQ(TrainSampler(d, 1, 8).num_starts(), 40 - 8 + 30 - 8);
  EXPECT_EQ(d.loss_mask(1).counted_entries(), 1);
}

TEST(LossMask, ACountThatDiffersFromItsShardNamesBothFiles) {
  TempDir dir;
  write_shard(dir.file("a.bin"), std::vector<int32_t>{1, 2, 3, 4}, TokenWidth::u16);
  write_loss_mask(dir.file("a.mask"), std::vector<uint8_t>{1, 1, 1});
  const Shard shard(dir.file("a.bin"));
  const std::string msg = message_of([&] { LossMask m(dir.file("a.mask"), shard); });
  EXPECT_NE(msg.find(dir.file("a.mask") + ": holds 3 entries but its token shard " + dir.file("a.bin") +
                     " holds 4 tokens"),
            std::string::npos)
      << msg;
  // Through a Dataset too.
  const std::string via = message_of([&] { Dataset d(dir.file("a.bin")); });
  EXPECT_NE(via.find(dir.file("a.mask")), std::string::npos) << via;
  EXPECT_NE(via.find(dir.file("a.bin")), std::string::npos) << via;
}

TEST(LossMask, ABadHeaderOrSizeIsRejected) {
  TempDir dir;
  write_shard(dir.file("a.bin"), std::vector<int32_t>{1, 2}, TokenWidth::u16);
  const Shard shard(dir.file("a.bin"));
  write_shard(dir.file("a.mask"), std::vector<int32_t>{1, 2}, TokenWidth::u16);  // a shard, not a mask
  std::string msg = message_of([&] { LossMask m(dir.file("a.mask"), shard); });
  EXPECT_NE(msg.find("not a loss mask's (magic 20240611, version 1)"), std::string::npos) << msg;
  write_loss_mask(dir.file("a.mask"), std::vector<uint8_t>{1, 1});
  std::ofstream(dir.file("a.mask"), std::ios::binary | std::ios::app) << 'x';
  msg = message_of([&] { LossMask m(dir.file("a.mask"), shard); });
  EXPECT_NE(msg.find("header says 2 entries (1026 bytes) but the file is 1027 bytes"), std::string::npos) << msg;
}

TEST(LossMask, DatasetOpensMasksWhenEveryShardHasOne) {
  TempDir dir;
  write_masked_split(dir, {20, 30});
  const Dataset d(dir.file("train_*.bin"));
  ASSERT_TRUE(d.has_loss_mask());
  EXPECT_EQ(d.loss_mask(1).path(), dir.file("train_001.mask"));
  EXPECT_EQ(d.loss_mask(1).size(), 30);

  write_shard(dir.file("plain.bin"), std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  EXPECT_FALSE(Dataset(dir.file("plain.bin")).has_loss_mask());
}

TEST(LossMask, AShardWithoutItsMaskInAMaskedSplitIsAnError) {
  TempDir dir;
  write_masked_split(dir, {20, 30, 25});
  std::filesystem::remove(dir.file("train_001.mask"));
  const std::string msg = message_of([&] { Dataset d(dir.file("train_*.bin")); });
  EXPECT_NE(msg.find(dir.file("train_001.bin") + ": no loss mask " + dir.file("train_001.mask")), std::string::npos)
      << msg;
}

TEST(LossMask, MasksThatMetaJsonRecordsMustExist) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>{1, 2, 3}, TokenWidth::u16);
  std::ofstream(dir.file("meta.json")) << R"({"loss_mask": true, "train": {"shards": ["train_000.bin"]}})";
  const std::string msg = message_of([&] { Dataset d(dir.file("train_000.bin")); });
  EXPECT_NE(msg.find(dir.file("train_000.bin") + ": no loss mask"), std::string::npos) << msg;
  EXPECT_NE(msg.find("meta.json records loss masks"), std::string::npos) << msg;
  std::ofstream(dir.file("meta.json")) << R"({"loss_mask": false, "train": {"shards": ["train_000.bin"]}})";
  EXPECT_FALSE(Dataset(dir.file("train_000.bin")).has_loss_mask());
}

constexpr int kT = 8;

TEST(LossMask, TrainSamplerWritesMinusOneExactlyWhereTheMaskIsZero) {
  TempDir dir;
  write_masked_split(dir, {40, 5, 33});
  const Dataset data(dir.path());
  const TrainSampler s(data, 3, kT);
  const int rows = 16;
  std::vector<int32_t> in(rows * kT), tg(rows * kT);
  int64_t minus_ones_total = 0;
  for (int64_t step = 0; step < 20; ++step) {
    s.fill(step, 0, rows, in.data(), tg.data());
    int64_t counted = 0;
    for (int r = 0; r < rows; ++r) {
      for (int t = 0; t < kT; ++t) {
        const size_t k = size_t(r * kT + t);
        const int32_t next = in[k] + 1;  // the token the target position holds
        if (masked(next)) {
          ASSERT_EQ(tg[k], -1) << "step " << step << " row " << r << " t " << t;
          ++minus_ones_total;
        } else {
          ASSERT_EQ(tg[k], next) << "step " << step << " row " << r << " t " << t;
          ++counted;
        }
      }
      // Inputs are never masked: the model still reads the prompt.
      for (int t = 0; t + 1 < kT; ++t) ASSERT_EQ(in[size_t(r * kT + t + 1)], in[size_t(r * kT + t)] + 1);
    }
    EXPECT_EQ(s.counted_targets(step, 0, rows), counted) << "step " << step;
    // Any slice counts its own rows: the slices of a step add up to the step.
    EXPECT_EQ(s.counted_targets(step, 0, 5) + s.counted_targets(step, 5, rows - 5), counted);
  }
  EXPECT_GT(minus_ones_total, 0);
}

TEST(LossMask, ValSamplerMasksAndCountsTheSameWay) {
  TempDir dir;
  write_masked_split(dir, {35, 17});
  const Dataset data(dir.path());
  const ValSampler v(data, kT);
  ASSERT_EQ(v.num_windows(), 6);
  std::vector<int32_t> in(6 * kT), tg(6 * kT);
  v.fill(0, 6, in.data(), tg.data());
  int64_t counted = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const int32_t next = in[k] + 1;
    EXPECT_EQ(tg[k], masked(next) ? -1 : next) << k;
    counted += masked(next) ? 0 : 1;
  }
  EXPECT_EQ(v.counted_targets(0, 6), counted);
  EXPECT_EQ(v.counted_targets(6, 6), counted);  // wraps around to the same windows
  EXPECT_LT(counted, 6 * kT);
}

TEST(LossMask, WithoutMasksEveryTargetCounts) {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), std::vector<int32_t>(50, 7), TokenWidth::u16);
  const Dataset data(dir.path());
  EXPECT_EQ(TrainSampler(data, 1, kT).counted_targets(3, 2, 5), 5 * kT);
  EXPECT_EQ(ValSampler(data, kT).counted_targets(0, 4), 4 * kT);
}

}  // namespace
}  // namespace feast
