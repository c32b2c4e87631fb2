// Samplers: a training batch is a function of (seed, step) only, split-independent, made of
// shifted windows that never cross shards; validation windows are fixed and disjoint.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/error.h"
#include "tests/support/temp_dir.h"

namespace feast {
namespace {

using ::feast::testing::TempDir;

// Shard k holds tokens k*1000 + i, so a token says which shard and offset it came from.
void write_shards(const TempDir& dir, const std::vector<int>& lengths) {
  for (size_t k = 0; k < lengths.size(); ++k) {
    std::vector<int32_t> tokens(static_cast<size_t>(lengths[k]));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(k * 1000 + i);
    char name[32];
    std::snprintf(name, sizeof name, "train_%03zu.bin", k);
    write_shard(dir.file(name), tokens, TokenWidth::u32);
  }
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch train_batch(const TrainSampler& s, int64_t step, int64_t first, int count) {
  Batch b{std::vector<int32_t>(static_cast<size_t>(count * s.seq_len())),
          std::vector<int32_t>(static_cast<size_t>(count * s.seq_len()))};
  s.fill(step, first, count, b.inputs.data(), b.targets.data());
  return b;
}

constexpr int kT = 8;

TEST(TrainSampler, SameSeedAndStepGiveTheSameBatch) {
  TempDir dir;
  write_shards(dir, {300, 5, 200});
  Dataset data(dir.path());
  TrainSampler a(data, 42, kT), b(data, 42, kT);
  EXPECT_EQ(train_batch(a, 7, 0, 16), train_batch(b, 7, 0, 16));
  // Steps need not be visited in order: a resumed run starts in the middle.
  const Batch later = train_batch(a, 1000, 0, 16);
  train_batch(a, 3, 0, 16);
  EXPECT_EQ(train_batch(a, 1000, 0, 16), later);
}

TEST(TrainSampler, StepAndSeedChangeTheBatch) {
  TempDir dir;
  write_shards(dir, {300, 5, 200});
  Dataset data(dir.path());
  TrainSampler a(data, 42, kT), other_seed(data, 43, kT);
  EXPECT_NE(train_batch(a, 7, 0, 16), train_batch(a, 8, 0, 16));
  EXPECT_NE(train_batch(a, 7, 0, 16), train_batch(other_seed, 7, 0, 16));
}

TEST(TrainSampler, BatchDoesNotDependOnHowItIsSplit) {
  TempDir dir;
  write_shards(dir, {300, 5, 200});
  Dataset data(dir.path());
  TrainSampler s(data, 9, kT);
  const Batch whole = train_batch(s, 11, 0, 12);
  Batch pieces;
  for (auto [first, count] : {std::pair{0, 3}, std::pair{3, 1}, std::pair{4, 8}}) {
    const Batch part = train_batch(s, 11, first, count);
    pieces.inputs.insert(pieces.inputs.end(), part.inputs.begin(), part.inputs.end());
    pieces.targets.insert(pieces.targets.end(), part.targets.begin(), part.targets.end());
  }
  EXPECT_EQ(pieces, whole);
}

TEST(TrainSampler, TargetsAreShiftedInputsWithinOneShard) {
  TempDir dir;
  write_shards(dir, {30, 5, 20, 9});
  Dataset data(dir.path());
  TrainSampler s(data, 1, kT);
  for (int64_t step = 0; step < 50; ++step) {
    const Batch b = train_batch(s, step, 0, 8);
    for (int r = 0; r < 8; ++r) {
      const int32_t* in = &b.inputs[static_cast<size_t>(r * kT)];
      const int32_t* tg = &b.targets[static_cast<size_t>(r * kT)];
      for (int t = 0; t < kT; ++t) {
        // Consecutive ids within a shard; crossing into the next shard would jump by ~1000.
        ASSERT_EQ(tg[t], in[t] + 1) << "step " << step << " row " << r << " t " << t;
        if (t + 1 < kT) {
          ASSERT_EQ(in[t + 1], tg[t]);
        }
      }
      ASSERT_NE(in[0] / 1000, 1) << "drew from the 5-token shard, shorter than T + 1";
    }
  }
}

TEST(TrainSampler, DrawsEveryValidStartAndNothingElse) {
  TempDir dir;
  write_shards(dir, {12, 5, 10});  // T = 8: starts 0..3 of shard 0, none of 1, 0..1 of shard 2
  Dataset data(dir.path());
  TrainSampler s(data, 5, kT);
  EXPECT_EQ(s.num_starts(), 6);
  std::set<int32_t> starts;
  for (int64_t step = 0; step < 40; ++step) {
    const Batch b = train_batch(s, step, 0, 8);
    for (int r = 0; r < 8; ++r) starts.insert(b.inputs[static_cast<size_t>(r * kT)]);
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2, 3, 2000, 2001}));
}

TEST(TrainSampler, AllShardsTooShortNamesTheLongest) {
  TempDir dir;
  write_shards(dir, {4, 8, 6});
  Dataset data(dir.path());
  try {
    TrainSampler s(data, 1, kT);
    FAIL() << "a sampler over shards shorter than T + 1 was built";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.path()), std::string::npos) << msg;
    EXPECT_NE(msg.find("seq_len + 1 = 9"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir.file("train_001.bin") + ", has 8"), std::string::npos) << msg;
  }
}

TEST(ValSampler, WindowsAreDisjointConsecutiveAndWrap) {
  TempDir dir;
  write_shards(dir, {35, 5, 17});  // (35-1)/8 = 4 windows, none, (17-1)/8 = 2 windows
  Dataset data(dir.path());
  ValSampler v(data, kT);
  ASSERT_EQ(v.num_windows(), 6);
  const int B = 4;
  std::vector<int32_t> in(B * kT), tg(B * kT);
  std::vector<int32_t> all_targets, first_inputs;
  for (int64_t batch = 0; batch < 3; ++batch) {  // 12 windows: the 6 twice
    v.fill(batch * B, B, in.data(), tg.data());
    for (int r = 0; r < B; ++r) {
      first_inputs.push_back(in[static_cast<size_t>(r * kT)]);
      for (int t = 0; t < kT; ++t) {
        ASSERT_EQ(tg[static_cast<size_t>(r * kT + t)], in[static_cast<size_t>(r * kT + t)] + 1);
        all_targets.push_back(tg[static_cast<size_t>(r * kT + t)]);
      }
    }
  }
  EXPECT_EQ(first_inputs,
            (std::vector<int32_t>{0, 8, 16, 24, 2000, 2008, 0, 8, 16, 24, 2000, 2008}));
  const std::set<int32_t> one_pass(all_targets.begin(), all_targets.begin() + 6 * kT);
  EXPECT_EQ(one_pass.size(), static_cast<size_t>(6 * kT)) << "windows overlap";
}

TEST(ValSampler, SameBatchEveryEvaluation) {
  TempDir dir;
  write_shards(dir, {100});
  Dataset data(dir.path());
  ValSampler v(data, kT);
  std::vector<int32_t> a(2 * kT), b(2 * kT), at(2 * kT), bt(2 * kT);
  v.fill(2, 2, a.data(), at.data());
  ValSampler again(data, kT);
  again.fill(2, 2, b.data(), bt.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(at, bt);
  EXPECT_EQ(a[0], 16);
}

}  // namespace
}  // namespace feast
