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
#include "comm/self_communicator.h"
#include "tests/support/temp_dir.h"

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

TEST(Checksum, OfZerosWithoutTouchingZeros) {
  for (int64_t n : {0, 1, 5, 1000, (1 << 20) + 3}) {
    const std::vector<unsigned char> zeros(size_t(n), 0);
    EXPECT_EQ(crc32_of_zeros(n), crc32_of(zeros.data(), zeros.size())) << n;
  }
}

// The pieces of `data` (dataset `id`) that fall in [begin, end), cut at `cuts`.
std::vector<ChecksumPiece> pieces_of(const std::vector<unsigned char>& data, int64_t id,
                                     const std::vector<std::pair<size_t, size_t>>& runs) {
  std::vector<ChecksumPiece> out;
  for (auto [b, e] : runs) out.push_back({id, int64_t(b), int64_t(e - b), crc32_of(data.data() + b, e - b)});
  return out;
}

TEST(Checksum, SharesOfRanksHoldingDisjointPiecesCombineToTheWholeChecksum) {
  const std::vector<unsigned char> a = random_bytes(1000, 1), b = random_bytes(37, 2);
  // Three "ranks": dataset 0 dealt out in interleaved runs (as column slices are), dataset 1
  // held whole by rank 2, dataset 2 (empty) by nobody.
  std::vector<std::vector<ChecksumPiece>> ranks = {
      pieces_of(a, 0, {{0, 1}, {100, 101}, {512, 999}}),
      pieces_of(a, 0, {{1, 100}, {999, 1000}}),
      pieces_of(a, 0, {{101, 512}}),
  };
  const std::vector<ChecksumPiece> whole_b = pieces_of(b, 1, {{0, 37}});
  ranks[2].insert(ranks[2].end(), whole_b.begin(), whole_b.end());
  std::shuffle(ranks[0].begin(), ranks[0].end(), std::mt19937(3));  // any order
  const std::vector<int64_t> sizes = {1000, 37, 0};
  std::vector<int64_t> xors(3, 0), held(3, 0);
  for (const auto& mine : ranks) {
    const ChecksumShares s = checksum_shares(mine, sizes);
    for (size_t d = 0; d < 3; ++d) {
      xors[d] ^= s.share[d];
      held[d] += s.bytes[d];
    }
  }
  EXPECT_EQ(held, sizes);
  EXPECT_EQ(dataset_checksum(xors[0], 1000), crc32_of(a.data(), a.size()));
  EXPECT_EQ(dataset_checksum(xors[1], 37), crc32_of(b.data(), b.size()));
  EXPECT_EQ(dataset_checksum(xors[2], 0), 0u);
}

TEST(Checksum, OverlapsAndRunsPastTheEndAreBroken) {
  const std::vector<unsigned char> a = random_bytes(100, 4);
  EXPECT_EQ(checksum_shares(pieces_of(a, 0, {{0, 60}, {50, 100}}), {100}).bytes[0], kBroken);
  EXPECT_EQ(checksum_shares(pieces_of(a, 0, {{0, 100}}), {90}).bytes[0], kBroken);
  EXPECT_EQ(checksum_shares(pieces_of(a, 0, {{0, 50}, {60, 100}}), {100}).bytes[0], 90);  // a gap: short
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
