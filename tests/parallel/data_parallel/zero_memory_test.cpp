// ZeRO's point is memory: with dp data-parallel ranks, stage 1 must hold about 1/dp of the
// optimizer state and stage 2 also about 1/dp of the gradients (its shard plus a few
// bucket-sized staging slots). Measured on a stage built like the trainer builds it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "model/decoder_stage.h"
#include "parallel/data_parallel/grad_sync.h"
#include "comm/mpi_world.h"
#include "optim/adamw.h"

namespace feast {
namespace {

TEST(ZeroMemory, ShardsOptimizerStateAndGradientsByTheDataParallelDegree) {
  auto world = make_mpi_world(std::chrono::milliseconds(60'000));
  const int dp = world->size();
  if (dp < 2) GTEST_SKIP() << "needs at least two data-parallel ranks";
  ModelConfig c;
  c.n_layer = 8;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 256;
  c.max_seq_len = 32;
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  DecoderStage stage(c, StageSpec::whole(c), StageShape{1, 8, 1}, *backend, nullptr);
  const size_t bucket = 13'107;  // 0.05 MiB of floats, as the equivalence runs use
  stage.set_gradient_range_limit(bucket);
  const size_t n = stage.parameters().numel;
  size_t grads[3], state[3];
  for (int zero = 0; zero <= 2; ++zero) {
    GradientSync sync(*backend, n, stage.gradient_ranges(), zero, bucket, world.get(), nullptr);
    const ShardRange r = sync.optimizer_range();
    grads[zero] = sync.gradient_bytes();
    state[zero] = AdamW(*backend, stage.table(), stage.parameters(), r.begin, r.end, AdamWConfig{}).state_bytes();
  }
  if (world->rank() == 0)
    std::printf("ZeRO memory at dp %d (bytes): gradients %zu / %zu / %zu, optimizer %zu / %zu / %zu (stage 0 / 1 / 2)\n",
                dp, grads[0], grads[1], grads[2], state[0], state[1], state[2]);
  const double full_state = double(state[0]), full_grads = double(grads[0]);
  EXPECT_LE(double(state[1]), full_state / dp + 16);
  EXPECT_LE(double(state[2]), full_state / dp + 16);
  EXPECT_LE(double(grads[2]), full_grads * (1.0 / dp + 0.2)) << "ZeRO 2 keeps more than its shard and a few buckets";
}

}  // namespace
}  // namespace feast
