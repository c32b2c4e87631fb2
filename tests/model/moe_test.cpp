// Mixture-of-experts routing: the plan's tables (every choice on one row of its expert, in token
// order, dropless or past a capacity), expert parallelism's exchange, and a model whose every token picks the same experts
// (the worst imbalance: a router of zeros ties every expert, and ties go to the lower index),
// which runs forward and backward and counts its load and its dropped choices exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "model/decoder_stage.h"
#include "model/layers/moe_routing.h"

namespace feast {
namespace {

TEST(MoeRouting, EveryChoiceHasOneRowOfItsExpertInTokenOrder) {
  // 5 tokens, 2 choices each, over 3 experts.
  const std::vector<int32_t> expert = {0, 2, 2, 1, 0, 1, 2, 0, 1, 2};
  const RoutingPlan p = plan_routing(expert.data(), 5, 2, 3, 0);
  EXPECT_EQ(p.requested, (std::vector<int>{3, 3, 4}));
  EXPECT_EQ(p.rows, p.requested);
  EXPECT_EQ(p.offsets, (std::vector<int>{0, 3, 6, 10}));
  EXPECT_EQ(p.dropped, 0);
  // Expert 0's rows are tokens 0, 2, 3; expert 1's 1, 2, 4; expert 2's 0, 1, 3, 4.
  EXPECT_EQ(p.token, (std::vector<int32_t>{0, 2, 3, 1, 2, 4, 0, 1, 3, 4}));
  for (size_t i = 0; i < expert.size(); ++i) {
    const int row = p.slot[i];
    ASSERT_GE(row, p.offsets[size_t(expert[i])]);
    ASSERT_LT(row, p.offsets[size_t(expert[i]) + 1]);
    EXPECT_EQ(p.token[size_t(row)], int32_t(i / 2));
  }
}

TEST(MoeRouting, ACapacityKeepsTheFirstTokensAndDropsTheRest) {
  const std::vector<int32_t> expert = {0, 2, 2, 1, 0, 1, 2, 0, 1, 2};
  EXPECT_EQ(expert_capacity(1.0, 5, 2, 3), 4);  // ceil(5 * 2 / 3)
  EXPECT_EQ(expert_capacity(0.0, 5, 2, 3), 0);  // dropless
  const RoutingPlan p = plan_routing(expert.data(), 5, 2, 3, 2);
  EXPECT_EQ(p.requested, (std::vector<int>{3, 3, 4}));
  EXPECT_EQ(p.rows, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(p.dropped, 4);
  // Token 3's choice of expert 0 (its third) and tokens 4's of experts 1 and 2, 3's of 2 drop.
  EXPECT_EQ(p.slot, (std::vector<int32_t>{0, 4, 5, 2, 1, 3, -1, -1, -1, -1}));
  EXPECT_EQ(p.token, (std::vector<int32_t>{0, 2, 1, 2, 0, 1}));
}

TEST(MoeRouting, AnExchangeGroupsTheReceivedRowsByExpert) {
  // 2 ranks of 2 experts (0, 1 on rank 0; 2, 3 on rank 1), seen from rank 0: it sends 1, 2, 0, 3
  // rows to experts 0..3; rank 0 sends its experts 1 and 2 rows, rank 1 sends them 3 and 0.
  const ExpertExchange x = plan_exchange({1, 2, 0, 3}, {1, 2, 3, 0}, 2);
  EXPECT_EQ(x.send_rows, (std::vector<size_t>{3, 3}));
  EXPECT_EQ(x.recv_rows, (std::vector<size_t>{3, 3}));
  EXPECT_EQ(x.local_offsets, (std::vector<int>{0, 4, 6}));
  // Received: rank 0's expert 0 (row 0), its expert 1 (rows 1, 2), rank 1's expert 0 (rows 3..5).
  // Expert order: expert 0's rows from rank 0 then rank 1, then expert 1's.
  EXPECT_EQ(x.to_experts, (std::vector<int32_t>{0, 3, 4, 5, 1, 2}));
  for (size_t r = 0; r < x.to_experts.size(); ++r) EXPECT_EQ(x.to_ranks[size_t(x.to_experts[r])], int32_t(r));
}

// A Llama of two MoE blocks (4 experts, top 2), its routers zero: every token chooses experts 0
// and 1. Returns the stage's step totals after one training forward and backward.
MoeStepTotals worst_imbalance(double capacity_factor, float& loss, double& grad_squares) {
  ModelConfig c;
  c.arch = "llama";
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.intermediate_size = 24;
  c.vocab_size = 64;
  c.max_seq_len = 8;
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.aux_loss_coef = 0.01;
  c.moe.capacity_factor = capacity_factor;
  const int B = 2, T = 8, N = B * T;
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  DecoderStage stage(c, StageSpec::whole(c), StageShape{B, T, 1}, *backend, nullptr);
  initialize_parameters(stage, 7);
  for (const LocalParam& p : stage.table().params())
    if (p.spec->name.ends_with("router.weight")) write_parameter(stage, p, std::vector<float>(p.numel, 0.0f));
  Tensor grads = backend->allocate(DType::kFloat32, stage.parameters().numel);
  FlatGradientSink sink(grads.view());
  stage.set_gradient_sink(&sink);
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) {
    tokens[size_t(i)] = (i * 7) % 64;
    targets[size_t(i)] = (i * 11 + 3) % 64;
  }
  loss = stage.forward(0, tokens.data(), targets.data(), nullptr, B, T, 1.0f / float(N), MicroBatchPlace{0, 0, 1.0});
  stage.backward(0, B, T);
  grad_squares = backend->sum_of_squares(grads.view());
  return stage.take_moe_step();
}

TEST(MoeRouting, TheExpertsBuffersHoldEveryChoiceOrWhatACapacityLetsThrough) {
  // Dropless: every choice of every ep rank may come to one rank's experts.
  EXPECT_EQ(expert_rows_bound(0.0, 64, 2, 8, 1), 128u);
  EXPECT_EQ(expert_rows_bound(0.0, 64, 2, 8, 4), 512u);
  // A capacity of ceil(1.0 * 64 * 2 / 8) = 16 rows per expert from each rank: 8 experts' worth.
  EXPECT_EQ(expert_rows_bound(1.0, 64, 2, 8, 4), 128u);
  EXPECT_EQ(expert_rows_bound(1.0, 64, 2, 8, 1), 128u);
  // A capacity looser than every choice changes nothing.
  EXPECT_EQ(expert_rows_bound(9.0, 64, 2, 8, 2), 256u);
}

TEST(MoeWorstImbalance, EveryTokenOnTheSameExpertsRunsAndIsCounted) {
  float loss = 0;
  double squares = 0;
  const MoeStepTotals t = worst_imbalance(0.0, loss, squares);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_TRUE(std::isfinite(squares) && squares > 0);
  // Per block: 16 tokens on experts 0 and 1, none on 2 and 3.
  EXPECT_EQ(t.load, (std::vector<double>{16, 16, 0, 0, 16, 16, 0, 0}));
  EXPECT_EQ(t.dropped, 0);
  // transformers' loss for it: E * sum over choices j and experts e of (the share of choice j on
  // e) * (e's mean probability) = 4 * (1 * 1/4 + 1 * 1/4) = 2 (uniform probabilities, every first
  // choice on expert 0 and every second on expert 1). Uniform probabilities give top_k whatever the
  // choices; it is the probabilities' following the load that the loss punishes.
  EXPECT_NEAR(t.aux_loss, 2.0, 1e-6);
}

TEST(MoeWorstImbalance, ACapacityDropsWhatTheBusyExpertsCannotTake) {
  float loss = 0;
  double squares = 0;
  // Capacity ceil(1 * 16 * 2 / 4) = 8 of each expert's 16 choices per block: 16 dropped per block.
  const MoeStepTotals t = worst_imbalance(1.0, loss, squares);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(t.load, (std::vector<double>{16, 16, 0, 0, 16, 16, 0, 0}));  // choices, dropped ones included
  EXPECT_EQ(t.dropped, 32);
}

}  // namespace
}  // namespace feast
