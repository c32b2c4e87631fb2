// The pieces of a checkpoint that need no MPI: CRC-32 of a dataset assembled from the pieces
// ranks hold (in any order, and refused with a gap or an overlap), and the checkpoint
// directory's discipline: only final names count, leftovers of interrupted saves are removed,
// `latest` names the newest, and only the newest `keep` survive a save.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/checksum.h"
#include "core/error.h"
#include "parallel/self_communicator.h"
#include "../data/temp_dir.h"

namespace feast {
namespace {

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(Checksum, MatchesZlibsKnownValue) {
  const std::string s = "123456789";  // the CRC-32 check value of every CRC catalogue
  EXPECT_EQ(crc32_of(s.data(), s.size()), 0xCBF43926u);
  EXPECT_EQ(crc32_of(nullptr, 0), 0u);
}

TEST(Checksum, PiecesInAnyOrderCombineToTheWholeDatasetsChecksum) {
  const std::vector<unsigned char> a = random_bytes(1000, 1), b = random_bytes(37, 2);
  std::vector<ChecksumPiece> pieces;
  // Dataset 0 cut at irregular places; dataset 1 whole.
  const std::vector<size_t> cuts = {0, 1, 100, 101, 512, 999, 1000};
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    pieces.push_back({0, int64_t(cuts[i]), int64_t(cuts[i + 1] - cuts[i]), crc32_of(a.data() + cuts[i], cuts[i + 1] - cuts[i])});
  pieces.push_back({1, 0, 37, crc32_of(b.data(), b.size())});
  std::shuffle(pieces.begin(), pieces.end(), std::mt19937(3));
  const std::vector<CombinedChecksum> c = combine_checksums(pieces, {1000, 37});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(c[0].complete);
  EXPECT_EQ(c[0].crc, crc32_of(a.data(), a.size()));
  EXPECT_TRUE(c[1].complete);
  EXPECT_EQ(c[1].crc, crc32_of(b.data(), b.size()));
}

TEST(Checksum, AGapOrAnOverlapIsNotAChecksum) {
  const std::vector<unsigned char> a = random_bytes(100, 4);
  auto piece = [&](int64_t at, int64_t n) { return ChecksumPiece{0, at, n, crc32_of(a.data() + at, size_t(n))}; };
  EXPECT_FALSE(combine_checksums({piece(0, 50), piece(60, 40)}, {100})[0].complete);  // gap
  EXPECT_FALSE(combine_checksums({piece(0, 60), piece(50, 50)}, {100})[0].complete);  // overlap
  EXPECT_FALSE(combine_checksums({piece(0, 50)}, {100})[0].complete);                  // short
  EXPECT_TRUE(combine_checksums({piece(50, 50), piece(0, 50)}, {100})[0].complete);
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(CheckpointStore, OnlyFinalNamesCountNewestFirst) {
  testing::TempDir dir;
  EXPECT_TRUE(CheckpointStore(dir.file("missing")).complete().empty());
  for (const char* name : {"step_00000010.h5", "step_00000200.h5", "step_00000020.h5", ".step_00000300.h5.tmp",
                           "step_00000400.h5.partial", "notes.txt"})
    touch(dir.file(name));
  const std::vector<std::string> found = CheckpointStore(dir.path()).complete();
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0], dir.file("step_00000200.h5"));
  EXPECT_EQ(found[1], dir.file("step_00000020.h5"));
  EXPECT_EQ(found[2], dir.file("step_00000010.h5"));
}

TEST(CheckpointStore, SaveCommitsUpdatesLatestKeepsTheNewestAndClearsLeftovers) {
  testing::TempDir dir;
  const std::string d = dir.file("ckpt");
  std::filesystem::create_directories(d);
  touch(d + "/.step_00000007.h5.tmp");  // a save that a crash interrupted
  CheckpointStore store(d);
  const auto world = make_self_communicator();
  for (int step : {5, 10, 15, 20}) {
    std::string written;
    const std::string path = store.save(*world, step, /*keep=*/2, [&](const std::string& tmp) {
      written = tmp;
      EXPECT_FALSE(std::filesystem::exists(d + "/" + CheckpointStore::file_name(step)))
          << "the final name must not exist while the file is written";
      touch(tmp);
    });
    EXPECT_EQ(path, d + "/" + CheckpointStore::file_name(step));
    EXPECT_FALSE(std::filesystem::exists(written)) << "the temporary name must be gone after the commit";
    std::ifstream latest(d + "/latest");
    std::string name;
    latest >> name;
    EXPECT_EQ(name, CheckpointStore::file_name(step));
  }
  EXPECT_FALSE(std::filesystem::exists(d + "/.step_00000007.h5.tmp"));
  const std::vector<std::string> left = store.complete();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], d + "/step_00000020.h5");
  EXPECT_EQ(left[1], d + "/step_00000015.h5");
}

TEST(CheckpointStore, ASaveSetsAsideCheckpointsOfLaterStepsFromAnAbandonedTimeline) {
  testing::TempDir dir;
  CheckpointStore store(dir.path());
  const auto world = make_self_communicator();
  for (int step : {10, 20, 30}) store.save(*world, step, 5, [](const std::string& tmp) { touch(tmp); });
  store.save(*world, 15, 5, [](const std::string& tmp) { touch(tmp); });  // resumed from 10, saved at 15
  const std::vector<std::string> left = store.complete();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], dir.file("step_00000015.h5"));
  EXPECT_EQ(left[1], dir.file("step_00000010.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_00000020.h5.superseded")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step_00000030.h5.superseded")));
  EXPECT_EQ(CheckpointStore::step_of(dir.file("step_00000015.h5")), 15);
  EXPECT_EQ(CheckpointStore::step_of(dir.file("notes.txt")), -1);
}

TEST(CheckpointStore, AFailedWriteCommitsNothing) {
  testing::TempDir dir;
  CheckpointStore store(dir.path());
  const auto world = make_self_communicator();
  EXPECT_THROW(store.save(*world, 3, 2, [](const std::string& tmp) {
    touch(tmp);
    throw Error("disk full");
  }),
               Error);
  EXPECT_TRUE(store.complete().empty());
  EXPECT_FALSE(std::filesystem::exists(dir.file("latest")));
}

}  // namespace
}  // namespace feast
