// A Hugging Face import under ZeRO 3, on four ranks (dp 4): each rank reads only the weights
// it keeps.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/mpi_world.h"
#include "config/config.h"
#include "core/log.h"
#include "parallel/data_parallel/zero_shard.h"
#include "tests/support/mpi_test_support.h"
#include "train/training_run.h"

namespace feast {
namespace {

using testing::world_rank;
using testing::world_size;

const std::string kFixtures = std::string(FEAST_SOURCE_DIR) + "/tests/fixtures/hf";

// Under ZeRO 3 each rank reads only what it keeps (its shard): those elements equal the whole
// import's, the other pages were never written (they read zero, holding no memory), and
// gathering the units gives every weight of the whole import.
TEST(HfZero3, EachRankReadsOnlyWhatItKeeps) {
  ASSERT_EQ(world_size(), 4) << "ZeRO 3 at dp 4: run on four ranks";
  const std::string source = kFixtures + "/gpt2-tiny", data = kFixtures + "/finetune-gpt2-tiny.bin";
  auto config = [&](int zero) {
    return parse_config("", "hf_mpi_test",
                        {"model.init_from=\"" + source + "\"", "data.train=\"" + data + "\"", "parallel.dp=4",
                         "parallel.zero_stage=" + std::to_string(zero), "parallel.micro_batch_size=1",
                         "training.batch_size=4", "training.seq_len=16", "training.threads=1"});
  };
  const log::Quiet quiet;
  std::vector<float> whole;
  {
    const Config c = config(1);
    TrainingRun run(c, check_run(c, world_size()), make_mpi_world(std::chrono::milliseconds(60'000)));
    run.import_initial_weights();
    const TensorView p = run.stage().parameters();
    whole.assign(p.as<float>(), p.as<float>() + p.numel);
  }
  const Config c = config(3);
  TrainingRun run(c, check_run(c, world_size()), make_mpi_world(std::chrono::milliseconds(60'000)));
  run.import_initial_weights();
  const TensorView p = run.stage().parameters();
  const float* mine = p.as<float>();
  const ShardRange shard = shard_range(p.numel, 4, world_rank());
  size_t untouched = 0;
  for (size_t i = 0; i < p.numel; ++i) {
    if (i >= shard.begin && i < shard.end) {
      ASSERT_EQ(mine[i], whole[i]) << "element " << i << ", which this rank keeps";
    } else if (mine[i] == 0.0f) {
      ++untouched;
    }
  }
  EXPECT_GT(untouched, p.numel / 2) << "the parameters outside this rank's shard were written";
  run.gather_parameters();
  for (size_t i = 0; i < p.numel; ++i) ASSERT_EQ(mine[i], whole[i]) << "element " << i << " after gathering";
}

}  // namespace
}  // namespace feast
