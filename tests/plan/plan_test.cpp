// The planner's cost model on its own: the closed forms, a memory figure counted by hand, the
// layout search (which layouts exist, which plan_layout refuses, which do not fit, the order),
// and the links each group crosses. The memory against the real trainer on every rank is
// plan_memory_mpi_test.cpp.
#include "plan/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/error.h"
#include "model/flop_count.h"
#include "model/parameters.h"
#include "model/architecture.h"
#include "parallel/pipeline/schedule.h"

namespace feast {
namespace {

// configs/demo.toml's model and batch: GPT-2, 4 layers, 4 heads, 128 channels, 32 sequences of 64.
Config demo() {
  Config c;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 128;
  c.model.vocab_size = 256;
  c.model.max_seq_len = 128;
  c.parallel.micro_batch_size = 8;
  c.training.batch_size = 32;
  c.training.seq_len = 64;
  return c;
}

TEST(PlanClosedForms, CollectivesFollowTheTextbook) {
  const Link link{100e9, 0};
  // Ring all-reduce of 1 GB over 8: 2 (7/8) 1e9 / 1e11 = 17.5 ms; reduce-scatter and all-gather
  // half of it each; one rank moves nothing.
  EXPECT_DOUBLE_EQ(ring_allreduce_seconds(1e9, 8, link), 0.0175);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(1e9, 8, link), 0.00875);
  EXPECT_DOUBLE_EQ(allgather_seconds(1e9, 8, link), 0.00875);
  EXPECT_EQ(ring_allreduce_seconds(1e9, 1, link), 0.0);
  // α: 2(n-1) steps of a ring all-reduce, n-1 of a reduce-scatter, one per message.
  const Link slow{100e9, 1e-5};
  EXPECT_NEAR(ring_allreduce_seconds(1e9, 8, slow), 0.0175 + 14e-5, 1e-12);
  EXPECT_NEAR(reduce_scatter_seconds(1e9, 4, slow), 0.75e-2 + 3e-5, 1e-12);
  EXPECT_NEAR(send_recv_seconds(1e6, slow), 1e-5 + 1e-5, 1e-15);
  // A parameter server: one dedicated server's link carries every worker's P, N P/B; feast's dp
  // co-located servers each carry (dp-1) shares of P/dp, a ring reduce-scatter's bandwidth term.
  EXPECT_DOUBLE_EQ(parameter_server_seconds(1e9, 8, 1, false, link), 0.08);
  EXPECT_DOUBLE_EQ(parameter_server_seconds(1e9, 8, 8, true, link), reduce_scatter_seconds(1e9, 8, link));
  EXPECT_EQ(parameter_server_seconds(1e9, 1, 1, true, link), 0.0);
}

TEST(PlanClosedForms, PipelineIdleIsTheScheduleSimulations) {
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kOneFOneB, 4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(idle_fraction_formula(ScheduleKind::kZeroBubble, 4, 8), 3.0 / 27.0);
  EXPECT_EQ(idle_fraction_formula(ScheduleKind::kOneFOneB, 1, 5), 0.0);
  for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kGPipe, ScheduleKind::kZeroBubble})
    for (int p : {2, 4})
      for (int m : {1, 4, 8})
        EXPECT_NEAR(idle_fraction_formula(kind, p, m), ideal_idle_fraction(kind, p, m), 1e-12)
            << to_string(kind) << " p=" << p << " m=" << m;
}

// Interleaved 1F1B's layout: each stage's layers in v equal chunks, virtual stage c·p + s holding
// chunk c of stage s; the default split deals whole groups of v layers; a split or a batch it
// cannot group is refused naming its keys; the bubble is v times smaller, the transfers v times
// more.
TEST(PlanLayout, InterleavedChunksAndTheirRefusals) {
  Config c = demo();
  c.model.n_layer = 10;
  c.parallel.pp = 4;
  c.parallel.schedule = "interleaved-1f1b";
  c.parallel.virtual_stages = 2;
  c.parallel.micro_batch_size = 4;  // 8 micro-batches, a multiple of pp
  const LayoutPlan plan = plan_layout(c, 4);
  EXPECT_EQ(plan.stage_layers, (std::vector<int>{4, 2, 2, 2}));
  EXPECT_EQ(plan.virtual_stages, 2);
  // Virtual stages 0..7 hold 2 1 1 1 | 2 1 1 1 layers: stage 0 has layers 0-1 and 5-6.
  auto ranges = [&](int rank) {
    std::vector<std::pair<int, int>> out;
    for (const LayerRange& r : plan.stage_of(rank).chunks) out.push_back({r.first, r.count});
    return out;
  };
  EXPECT_EQ(ranges(0), (std::vector<std::pair<int, int>>{{0, 2}, {5, 2}}));
  EXPECT_EQ(ranges(1), (std::vector<std::pair<int, int>>{{2, 1}, {7, 1}}));
  EXPECT_EQ(ranges(3), (std::vector<std::pair<int, int>>{{4, 1}, {9, 1}}));
  EXPECT_TRUE(plan.stage_of(0).has_embedding);
  EXPECT_TRUE(plan.stage_of(3).has_head);
  EXPECT_TRUE(plan.stage_of(0).holds_layer(6));
  EXPECT_FALSE(plan.stage_of(0).holds_layer(2));

  auto error = [](const Config& bad, int world) {
    try {
      plan_layout(bad, world);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Config odd = c;
  odd.model.n_layer = 9;  // not whole chunks of 2
  EXPECT_NE(error(odd, 4).find("parallel.virtual_stages = 2 does not divide the model's 9 layers"), std::string::npos)
      << error(odd, 4);
  // Expert parallelism groups consecutive data-parallel ranks: ep must divide dp.
  Config experts = c;
  experts.model.arch = "llama";
  experts.model.moe.n_experts = 4;
  experts.parallel.ep = 4;
  experts.parallel.virtual_stages = 1;
  experts.parallel.schedule = "1f1b";
  experts.parallel.pp = 1;
  experts.parallel.stage_layers = {};
  EXPECT_NE(error(experts, 2).find("parallel.ep = 4 does not divide the data-parallel degree 2 (world / (tp * pp))"),
            std::string::npos)
      << error(experts, 2);
  EXPECT_EQ(error(experts, 8), "no error");
  Config split = c;
  split.parallel.stage_layers = {3, 3, 2, 2};
  EXPECT_NE(error(split, 4).find("does not divide stage 0's 3 layers"), std::string::npos) << error(split, 4);
  Config few = c;
  few.parallel.micro_batch_size = 16;  // 2 micro-batches over 4 stages
  EXPECT_NE(error(few, 4).find("make it a multiple of 4"), std::string::npos) << error(few, 4);

  // Where compute outweighs the transfers' latency (wide layers), the smaller bubble wins.
  PlanOptions o;
  c.model.n_embd = 1024;
  c.model.n_head = 16;
  const LayoutEstimate inter = estimate_layout(c, plan, o);
  Config plain = c;
  plain.parallel.schedule = "1f1b";
  plain.parallel.virtual_stages = 1;
  const LayoutEstimate one = estimate_layout(plain, plan_layout(plain, 4), o);
  EXPECT_DOUBLE_EQ(inter.pp_idle_fraction, 3.0 / (2 * 8 + 3));
  EXPECT_DOUBLE_EQ(one.pp_idle_fraction, 3.0 / (8 + 3));
  EXPECT_LT(inter.time.pp_idle_s, one.time.pp_idle_s);
}

// An interleaved config is searched as the trainer would run it: interleaved at the depths whose
// stages split into whole chunks (the demo's 4 layers: pp 2), 1F1B at pp 1, and pp 4 refused
// with plan_layout's message.
TEST(PlanSearch, InterleavedLayouts) {
  Config c = demo();
  c.parallel.schedule = "interleaved-1f1b";
  c.parallel.virtual_stages = 2;
  PlanOptions o;
  o.cluster.gpus = 4;
  int interleaved = 0, plain = 0, refused_pp4 = 0;
  for (const LayoutEstimate& l : plan_layouts(c, o)) {
    if (!l.valid) {
      if (l.layout.pp == 4) refused_pp4 += l.why.find("parallel.virtual_stages = 2") != std::string::npos;
      continue;
    }
    if (l.layout.schedule == "interleaved-1f1b") {
      ++interleaved;
      EXPECT_EQ(l.layout.pp, 2);
      EXPECT_DOUBLE_EQ(l.pp_idle_fraction, 1.0 / (2.0 * l.layout.num_micro_batches + 1));
    }
    if (l.layout.pp == 1) {
      ++plain;
      EXPECT_EQ(l.layout.schedule, "1f1b");
    }
  }
  EXPECT_GT(interleaved, 0);
  EXPECT_GT(plain, 0);
  EXPECT_GT(refused_pp4, 0);
}

// Under zero-bubble the search keeps to what the trainer runs (no recomputation), predicts the
// zero-bubble bubble, and needs more activation memory than 1F1B for the same layout (p slots on
// every stage, the output gradients kept between the halves of each backward).
TEST(PlanSearch, ZeroBubbleLayouts) {
  PlanOptions o;
  o.cluster.gpus = 4;
  Config zb = demo();
  zb.parallel.schedule = "zero-bubble";
  const std::vector<LayoutEstimate> all = plan_layouts(zb, o), base = plan_layouts(demo(), o);
  int compared = 0;
  for (const LayoutEstimate& l : all) {
    if (!l.valid) continue;
    EXPECT_EQ(l.layout.recompute, "none") << l.layout.name();
    EXPECT_NEAR(l.pp_idle_fraction,
                idle_fraction_formula(ScheduleKind::kZeroBubble, l.layout.pp, l.layout.num_micro_batches), 1e-15);
    LayoutChoice as_1f1b = l.layout;
    as_1f1b.schedule = "1f1b";
    for (const LayoutEstimate& b : base) {
      if (!b.valid || b.layout.name() != as_1f1b.name() || l.layout.pp == 1) continue;
      EXPECT_GT(l.memory.activations, b.memory.activations) << l.layout.name();
      EXPECT_LT(l.time.pp_idle_s, b.time.pp_idle_s) << l.layout.name();
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

TEST(PlanClosedForms, ClusterMttfAndYoungDaly) {
  // Meta's Llama 3 run: about 50,000 h per GPU over 16,384 GPUs is a failure every 3 hours.
  EXPECT_NEAR(cluster_mttf_hours(50000, 16384), 3.0518, 1e-4);
  EXPECT_NEAR(young_daly_interval_seconds(60, 3600), std::sqrt(2.0 * 60 * 3600), 1e-9);
  EXPECT_NEAR(young_daly_interval_seconds(60, 3600), 657.267, 1e-3);
}

TEST(PlanMemory, OneRankOfATinyModelCountedByHand) {
  Config c;
  c.model.n_layer = 1;
  c.model.n_head = 1;
  c.model.n_embd = 4;
  c.model.vocab_size = 256;
  c.model.max_seq_len = 8;
  c.parallel.micro_batch_size = 1;
  c.training.seq_len = 2;
  c.parallel.zero_stage = 0;
  const LayoutPlan plan = plan_layout(c, 1);
  const PlannedMemory m = rank_memory(c, plan, 0, {PlanDType::kFp32, 1});
  // wte 256x4, wpe 8x4, ln_1 8, qkv 12x4+12, proj 4x4+4, ln_2 8, fc 16x4+16, proj 4x16+4, ln_f 8.
  const double n = 1024 + 32 + 8 + 60 + 20 + 8 + 80 + 68 + 8;
  EXPECT_EQ(m.parameters, 4 * n);
  EXPECT_EQ(m.gradients, 4 * n);
  EXPECT_EQ(m.optimizer, 8 * n);
  // One slot of 2 rows: input 32 + tokens 8 + targets 8; the block: two norms (out 32, mean 8,
  // rstd 8), qkv 96, probabilities 1x2x2 floats 16, y 32, fc 128, gelu 128, residuals 64; the
  // head: ln_f 48, logits 2x256 floats 2048, losses 8. Scratch: tmp 32, dres 32, dqkv 96, dy 32,
  // dbig 128, cross-entropy 24, attention backward 1 thread x 2 x 2 floats 16.
  EXPECT_EQ(m.activations, (32 + 8 + 8) + (96 + 96 + 16 + 32 + 128 + 128 + 64) + (48 + 2048 + 8));
  EXPECT_EQ(m.workspace, 32 + 32 + 96 + 32 + 128 + 24 + 16);
  EXPECT_EQ(m.communication, 0);
  EXPECT_EQ(m.buffers, 0);  // learned positions: no rotary tables

  // Mixed precision: bf16 parameters and activations, float32 gradients, a float32 master copy
  // beside the moments, the attention's log-sum-exp instead of its probabilities.
  const PlannedMemory b = rank_memory(c, plan, 0, {PlanDType::kBf16, 1, true});
  EXPECT_EQ(b.parameters, 2 * n);
  EXPECT_EQ(b.gradients, 4 * n);
  EXPECT_EQ(b.optimizer, 12 * n);
  // Per slot: input 16 + tokens 8 + targets 8; the block: norms 2 x (16 + 8 + 8), qkv 48,
  // log-sum-exp 1 x 2 floats 8, y 16, fc 64, gelu 64, residuals 32; the head: ln_f 32, logits
  // 1024, losses 8. Scratch: 16 + 16 + 48 + 16 + 64, cross-entropy 24, no attention scratch.
  EXPECT_EQ(b.activations, (16 + 8 + 8) + (64 + 48 + 8 + 16 + 64 + 64 + 32) + (32 + 1024 + 8));
  EXPECT_EQ(b.workspace, 16 + 16 + 48 + 16 + 64 + 24);

  // fp32 on a GPU (training.dtype = "fp32"): the CPU's sizes, no master copy, and the fused
  // attention's log-sum-exp instead of the probabilities and their scratch.
  const PlannedMemory g = rank_memory(c, plan, 0, {PlanDType::kFp32, 1, true});
  EXPECT_EQ(g.parameters, m.parameters);
  EXPECT_EQ(g.optimizer, m.optimizer);
  EXPECT_EQ(g.activations, (32 + 8 + 8) + (96 + 96 + 8 + 32 + 128 + 128 + 64) + (48 + 2048 + 8));
  EXPECT_EQ(g.workspace, 32 + 32 + 96 + 32 + 128 + 24);
}

TEST(PlanMemory, ZeroShardsOptimizerStateAndGradients) {
  Config c = demo();
  c.parallel.dp = 4;
  // Small buckets, as a large model's are small against it: with the default 4 MiB the demo
  // model is one bucket, and ZeRO 2's three staging slots would hold more than ZeRO 1's buffer.
  c.parallel.bucket_mb = 0.05;
  std::vector<PlannedMemory> z;
  for (int zero = 0; zero <= 2; ++zero) {
    c.parallel.zero_stage = zero;
    z.push_back(rank_memory(c, plan_layout(c, 4), 0));
  }
  EXPECT_EQ(z[0].parameters, z[1].parameters);
  EXPECT_NEAR(z[1].optimizer, z[0].optimizer / 4, 16);
  EXPECT_EQ(z[1].gradients, z[0].gradients);  // the full buffer, reduce-scattered in place
  // The shard, three bucket-sized slots, and the token embedding the tied head also writes.
  EXPECT_LT(z[2].gradients, z[1].gradients * 0.6);
  EXPECT_EQ(z[2].optimizer, z[1].optimizer);
  // ZeRO does nothing at dp 1 (GradientSync treats it as stage 0).
  c.parallel.dp = 1;
  const PlannedMemory one0 = rank_memory(c, plan_layout(c, 1), 0);
  c.parallel.zero_stage = 2;
  const PlannedMemory one2 = rank_memory(c, plan_layout(c, 1), 0);
  EXPECT_EQ(one0.gradients, one2.gradients);
  EXPECT_EQ(one0.optimizer, one2.optimizer);
}

TEST(PlanTime, ComputeIsTheModelFlopCountAtTheAchievedRate) {
  for (const char* arch : {"gpt2", "llama"}) {
    Config c = demo();
    c.model.arch = arch;
    c.training.batch_size = 8;
    const LayoutPlan plan = plan_layout(c, 1);
    PlanOptions o;
    o.cluster.tflops = 2;
    const LayoutEstimate e = estimate_layout(c, plan, o);
    const double expected = training_flops_per_token(c.model, 64) * 8 * 64 / 2e12;
    EXPECT_NEAR(e.time.compute_s, expected, expected * 1e-12) << arch;
    EXPECT_EQ(e.time.tp_comm_s, 0);
    EXPECT_EQ(e.time.pp_idle_s, 0);
    EXPECT_EQ(e.time.dp_comm_s, 0);
    EXPECT_NEAR(e.tokens_per_s, 8 * 64 / expected, 1e-6 * 8 * 64 / expected);
    EXPECT_EQ(e.efficiency, 1.0);

    // Two stages and 4 micro-batches over free links: with micro-batch times u0 + u1 = the
    // whole model's (expected / 4), the slowest stage computes 4 max(u) and idles min(u) (the
    // bubble: (m - 1) max u + sum u, less its own work).
    c.parallel.pp = 2;
    c.parallel.micro_batch_size = 2;
    o.cluster.intra_node = {1e30, 0};
    const LayoutEstimate p = estimate_layout(c, plan_layout(c, 2), o);
    const double u_max = p.time.compute_s / 4;
    EXPECT_GT(u_max, expected / 8);  // the head's stage is the larger one
    EXPECT_NEAR(p.time.pp_idle_s, expected / 4 - u_max, expected * 1e-12);
    EXPECT_NEAR(p.time.dp_comm_s, 0, 1e-15);
    EXPECT_NEAR(p.pp_idle_fraction, 1.0 / 5, 1e-12);
  }
}

TEST(PlanTime, GroupsThatSpanNodesUseTheSlowerLink) {
  Config c = demo();
  c.parallel.tp = 4;
  c.parallel.pp = 1;
  PlanOptions o;
  o.cluster.gpus = 8;
  o.cluster.gpus_per_node = 8;
  o.cluster.intra_node.latency = o.cluster.inter_node.latency = 0;  // bandwidth terms only
  const LayoutEstimate one_node = estimate_layout(c, plan_layout(c, 8), o);
  EXPECT_FALSE(one_node.tp_inter_node);
  EXPECT_FALSE(one_node.dp_inter_node);
  o.cluster.gpus_per_node = 4;  // tp-dp-pp: a tp group is 4 consecutive ranks, one node; dp spans two
  const LayoutEstimate tp_in_node = estimate_layout(c, plan_layout(c, 8), o);
  EXPECT_FALSE(tp_in_node.tp_inter_node);
  EXPECT_TRUE(tp_in_node.dp_inter_node);
  EXPECT_EQ(tp_in_node.time.tp_comm_s, one_node.time.tp_comm_s);
  o.cluster.gpus_per_node = 2;
  const LayoutEstimate tp_across = estimate_layout(c, plan_layout(c, 8), o);
  EXPECT_TRUE(tp_across.tp_inter_node);
  EXPECT_NEAR(tp_across.time.tp_comm_s / one_node.time.tp_comm_s, 9.0, 1e-9);  // 50 GB/s against 450 GB/s
  // The order decides which group stays in a node: dp innermost puts the tp group across nodes.
  c.parallel.order = "dp-tp-pp";
  o.cluster.gpus_per_node = 4;
  const LayoutEstimate dp_inner = estimate_layout(c, plan_layout(c, 8), o);
  EXPECT_TRUE(dp_inner.tp_inter_node);
  EXPECT_FALSE(dp_inner.dp_inter_node);
}

// A Llama of 4 layers whose blocks 1 and 3 are mixtures of 8 experts (top 2).
Config moe_demo() {
  Config c = demo();
  c.model.arch = "llama";
  c.model.n_kv_head = 2;
  c.model.moe.n_experts = 8;
  c.model.moe.top_k = 2;
  c.model.moe.intermediate_size = 128;
  c.model.moe.every = 2;
  return c;
}

TEST(PlanTime, ExpertsComputeForTheirTokensOnlyAndExpertParallelismExchangesTheRows) {
  Config c = moe_demo();
  c.training.batch_size = 8;
  PlanOptions o;
  o.cluster.tflops = 2;
  // One rank: the model's FLOPs with only the top 2 experts of each MoE block counted.
  const LayoutEstimate one = estimate_layout(c, plan_layout(c, 1), o);
  const double expected = training_flops_per_token(c.model, 64) * 8 * 64 / 2e12;
  EXPECT_NEAR(one.time.compute_s, expected, expected * 1e-12);
  Config dense_cost = c;  // every expert counted would be more
  dense_cost.model.moe.top_k = 8;
  EXPECT_LT(one.time.compute_s, estimate_layout(dense_cost, plan_layout(dense_cost, 1), o).time.compute_s);
  EXPECT_EQ(one.time.ep_comm_s, 0);

  // dp 4 at ep 2: per micro-batch and MoE block, the counts twice and four exchanges of the
  // N k rows of C (fp32 here), of which half leave the rank; 2 blocks, 2 micro-batches of 1.
  c.parallel.dp = 4;
  c.parallel.micro_batch_size = 1;
  const LayoutEstimate ep1 = estimate_layout(c, plan_layout(c, 4), o);
  EXPECT_EQ(ep1.time.ep_comm_s, 0);
  EXPECT_EQ(ep1.layout.ep, 1);
  c.parallel.ep = 2;
  const LayoutEstimate ep2 = estimate_layout(c, plan_layout(c, 4), o);
  EXPECT_EQ(ep2.layout.ep, 2);
  EXPECT_EQ(ep2.layout.name(), "tp1 pp1 dp4 zero1 mbs1 m2 ep2");  // zero_stage defaults to 1
  const Link& link = o.cluster.intra_node;
  const double rows = 64.0 * 2 * 128 * 4;  // 64 tokens, top 2, 128 channels, float32
  const double per_block = 2 * alltoall_seconds(4.0 * 8, 2, link) + 4 * alltoall_seconds(rows, 2, link);
  EXPECT_NEAR(ep2.time.ep_comm_s, 2 * 2 * per_block, 1e-15);
  EXPECT_NEAR(ep2.time.step_s() - ep1.time.step_s(),
              ep2.time.ep_comm_s + ep2.time.dp_comm_s - ep1.time.dp_comm_s, 1e-12);
  // Each rank holds half the experts: fewer parameters, and their gradients reduced over the 2
  // ranks that hold the same experts rather than all 4.
  EXPECT_LT(ep2.memory.parameters, ep1.memory.parameters);
  EXPECT_NE(ep2.time.dp_comm_s, ep1.time.dp_comm_s);
  EXPECT_EQ(alltoall_seconds(rows, 2, Link{1e9, 0}), rows / 2 / 1e9);
  // ep groups are consecutive data-parallel ranks: with dp innermost and 2 GPUs a node, a group
  // of 2 stays in its node and one of 4 spans two.
  o.cluster.gpus_per_node = 2;
  c.parallel.order = "dp-tp-pp";
  EXPECT_FALSE(estimate_layout(c, plan_layout(c, 4), o).ep_inter_node);
  c.parallel.ep = 4;
  EXPECT_TRUE(estimate_layout(c, plan_layout(c, 4), o).ep_inter_node);
}

TEST(PlanSearch, MixtureOfExpertsLayoutsTryEveryExpertParallelDegree) {
  PlanOptions o;
  o.cluster.gpus = 8;
  const std::vector<LayoutEstimate> all = plan_layouts(moe_demo(), o);
  // ep divides dp and the 8 experts: dp 8 gives ep 1, 2, 4, 8; dp 4 gives 1, 2, 4; dp 2 gives
  // 1, 2; dp 1 gives 1. Every ep > 1 layout has its exchanges timed; no dense model gets one.
  std::set<std::pair<int, int>> seen;  // (dp, ep)
  for (const LayoutEstimate& l : all) {
    if (!l.valid) continue;
    seen.insert({l.layout.dp, l.layout.ep});
    EXPECT_EQ(l.layout.dp % l.layout.ep, 0) << l.layout.name();
    EXPECT_EQ(l.time.ep_comm_s > 0, l.layout.ep > 1) << l.layout.name();
  }
  const std::set<std::pair<int, int>> want = {{8, 1}, {8, 2}, {8, 4}, {8, 8}, {4, 1}, {4, 2}, {4, 4},
                                              {2, 1}, {2, 2}, {1, 1}};
  EXPECT_EQ(seen, want);
  for (const LayoutEstimate& l : plan_layouts(demo(), o)) EXPECT_EQ(l.layout.ep, 1);
}

TEST(PlanSearch, EnumeratesEveryLayoutAndExplainsTheRefusedOnes) {
  PlanOptions o;
  o.cluster.gpus = 8;
  const std::vector<LayoutEstimate> all = plan_layouts(demo(), o);
  // (tp, pp, dp) with tp pp dp = 8: 10 triples; tp 8 (4 heads) and pp 8 (4 layers) are refused.
  // The valid ones: per dp, the ZeRO stages (one at dp 1) times the divisors of 32 / dp:
  // dp 8: 4 x 3; dp 4 (two triples): 4 x 4 each; dp 2 (three): 4 x 5 each; dp 1 (two): 1 x 6 each;
  // each with three recomputation modes, with and without optimizer offload; those with tp > 1
  // (tp 2 at dp 4, 2 and 1, tp 4 at dp 2 and 1: 16 + 20 + 6 + 20 + 6 = 68) also with sequence
  // parallelism. Where pp > 1 (pp 2 at dp 4, 2 and 1; pp 4 at dp 2 and 1) zero-bubble too, only
  // without recomputation: (16 + 20 + 20 + 6 + 6) x 2 offload choices, and again with sequence
  // parallelism where tp > 1 (20 + 6 + 6) x 2: 200.
  EXPECT_EQ(all.size(), 2u + 6u * (116u + 68u) + 200u);
  int valid = 0, fits = 0;
  std::set<std::string> refused;
  for (const LayoutEstimate& l : all) {
    if (!l.valid) {
      refused.insert(l.why);
      continue;
    }
    ++valid;
    fits += l.fits ? 1 : 0;
    EXPECT_EQ(l.layout.tp * l.layout.pp * l.layout.dp, 8);
    EXPECT_EQ(l.layout.dp * l.layout.micro_batch_size * l.layout.num_micro_batches, 32);
    EXPECT_TRUE(l.layout.dp > 1 || l.layout.zero_stage == 0) << l.layout.name();
    EXPECT_EQ(l.stage_memory.size(), size_t(l.layout.pp));
    EXPECT_NEAR(l.time.step_s(),
                l.time.compute_s + l.time.tp_comm_s + l.time.pp_idle_s + l.time.dp_comm_s + l.time.offload_s, 1e-15);
    EXPECT_EQ(l.time.offload_s > 0, l.layout.offload) << l.layout.name();
    EXPECT_NEAR(l.tokens_per_s * l.time.step_s(), 32 * 64, 1e-6);
    EXPECT_NEAR(l.pp_idle_fraction,
                idle_fraction_formula(parse_schedule_kind(l.layout.schedule), l.layout.pp, l.layout.num_micro_batches),
                1e-15);
  }
  EXPECT_EQ(valid, 6 * (116 + 68) + 200);
  EXPECT_EQ(fits, 6 * (116 + 68) + 200);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_NE(refused.begin()->find("parallel.pp = 8 stages but model.n_layer = 4"), std::string::npos) << *refused.begin();
  EXPECT_NE(refused.rbegin()->find("parallel.tp = 8 does not divide model.n_head = 4"), std::string::npos)
      << *refused.rbegin();
  // Best first.
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i].fits) {
      EXPECT_GE(all[i - 1].tokens_per_s * (1 + 1e-8), all[i].tokens_per_s);
    }
}

TEST(PlanSearch, DropsWhatDoesNotFitAndSaysHowMuchItNeeds) {
  PlanOptions o;
  o.cluster.gpus = 8;
  o.cluster.gpu_memory = 6.0 * 1024 * 1024;  // 6 MiB: the demo's layouts need 4 to 25
  const std::vector<LayoutEstimate> all = plan_layouts(demo(), o);
  int fit = 0, dropped = 0;
  bool fitting_part = true;
  for (const LayoutEstimate& l : all) {
    if (!l.valid) continue;
    if (l.fits) {
      EXPECT_TRUE(fitting_part) << "a fitting layout after one that does not fit";
      EXPECT_LE(l.memory.total(), o.cluster.gpu_memory);
      EXPECT_TRUE(l.why.empty());
      ++fit;
    } else {
      fitting_part = false;
      EXPECT_GT(l.memory.total(), o.cluster.gpu_memory);
      EXPECT_EQ(l.why.rfind("needs ", 0), 0u) << l.why;
      EXPECT_NE(l.why.find(" MiB > 6.0 MiB per GPU"), std::string::npos) << l.why;
      ++dropped;
    }
  }
  EXPECT_GT(fit, 0);
  EXPECT_GT(dropped, 0);
  // The memory of a layout is its largest stage's; the stages are the ranks' (tp 0, dp 0).
  for (const LayoutEstimate& l : all) {
    if (!l.valid) continue;
    double largest = 0;
    for (const PlannedMemory& s : l.stage_memory) largest = std::max(largest, s.total());
    EXPECT_EQ(l.memory.total(), largest);
  }
}

TEST(PlanSearch, ParameterServerLayoutsUseNoZeroStage) {
  Config c = demo();
  c.parallel.dp_sync = "parameter-server";
  c.parallel.zero_stage = 0;
  PlanOptions o;
  o.cluster.gpus = 4;
  for (const LayoutEstimate& l : plan_layouts(c, o)) {
    if (!l.valid) continue;
    EXPECT_EQ(l.layout.zero_stage, 0);
    if (l.layout.dp > 1) {
      EXPECT_GT(l.time.dp_comm_s, 0);
    }
  }
}

TEST(PlanSearch, GlobalBatchFromTheConfig) {
  Config c = demo();
  EXPECT_EQ(global_batch_sequences(c, 8), 32);
  c.training.batch_size = 0;
  c.parallel.tp = 2;
  c.parallel.pp = 2;
  c.parallel.num_micro_batches = 3;
  EXPECT_EQ(global_batch_sequences(c, 8), 2 * 3 * 8);  // dp = 8 / (2 x 2)
  c.parallel.dp = 1;
  EXPECT_EQ(global_batch_sequences(c, 8), 1 * 3 * 8);
  c.parallel.dp = 0;
  try {
    global_batch_sequences(c, 6);
    FAIL() << "6 GPUs do not divide by tp x pp = 4";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--set training.batch_size=N"), std::string::npos) << e.what();
  }
  // A stage split for another pipeline depth is dropped, one for this depth kept.
  c.parallel.stage_layers = {3, 1};
  EXPECT_TRUE(config_for_layout(c, {1, 4, 2, 0, 1, 1}, 8).parallel.stage_layers.empty());
  EXPECT_EQ(config_for_layout(c, {1, 2, 4, 0, 1, 1}, 8).parallel.stage_layers, (std::vector<int>{3, 1}));
}

TEST(PlanSearch, StageFlopsAddUpToTheModelsCount) {
  // pp 4, one micro-batch, free links: compute (the slowest stage) plus idle (the other stages'
  // turns) is the whole model's 6N + 6LTC, so the stages' counts add up to flop_count.h's.
  for (const char* arch : {"gpt2", "llama"}) {
    Config c = demo();
    c.model.arch = arch;
    c.training.batch_size = 8;
    c.parallel.micro_batch_size = 8;
    PlanOptions o;
    o.cluster.tflops = 1;
    o.cluster.intra_node = {1e30, 0};
    const double whole = training_flops_per_token(c.model, 64) * 8 * 64 / 1e12;
    c.parallel.pp = 4;
    const LayoutEstimate e = estimate_layout(c, plan_layout(c, 4), o);
    EXPECT_NEAR(e.time.compute_s + e.time.pp_idle_s, whole, whole * 1e-12) << arch;
    EXPECT_GT(e.time.compute_s, whole / 4) << arch;
  }
}

}  // namespace
}  // namespace feast
