// The planner held to the truth: for layouts that run here (4 ranks), every rank's planned
// memory (plan/cost_model.h) matches what the real TrainingRun allocates and reports
// (TrainingRun::memory_bytes()), part by part, within 5%; and the plan's per-layout figure (the
// largest stage) is the largest rank's. GPT-2 (tied head, learned positions) and Llama (GQA,
// SwiGLU, untied head), ZeRO 0/1/2/3 and the parameter server (dense and sparse), both schedules,
// several micro-batches in flight, selective and full activation recomputation (of every block
// and of the first block of each stage), with the activations one micro-batch keeps checked too,
// and the optimizer offloaded to host memory (its host bytes checked too); sequence and context
// parallelism; LoRA over a base in the compute dtype, bfloat16 and NF4; mixtures of experts, with
// expert parallelism.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/log.h"
#include "comm/mpi_world.h"
#include "tests/support/mpi_test_support.h"
#include "plan/cost_model.h"
#include "train/training_run.h"

namespace feast {
namespace {

struct Case {
  std::string arch;
  int tp, pp, dp, zero;
  std::string schedule = "1f1b";
  int micro_batch_size = 2;
  std::string dp_sync = "allreduce";
  bool sparse = false;  // parallel.ps_sparse_embedding
  std::string grad_reduce_dtype = "fp32";
  std::string recompute = "none";
  int recompute_layers = 0;
  bool offload = false;
  bool sequence_parallel = false;
  int cp = 1;
  int virtual_stages = 1;  // interleaved-1f1b
  // LoRA (rank 4, every product adapted) over a base kept in: "auto", "bf16", "nf4", "nf4-dq";
  // empty: no LoRA. lora_dropout: its dropped input and gradient buffers.
  std::string lora_base = "";
  double lora_dropout = 0;
  bool document_mask = false;  // every stage keeps each slot's document positions
  // Mixture of experts ("llama-moe"): 4 experts top 2 in blocks 1 and 3 (every 2; "llama-moe1":
  // every block), a gated shared expert, over ep data-parallel ranks.
  int ep = 1;
  double capacity = 0;  // model.moe.capacity_factor: the experts' buffers hold what it lets through
};

Config case_config(const Case& k, const std::string& corpus) {
  Config c;
  c.model.arch = k.arch.substr(0, k.arch.find('-'));
  c.model.n_layer = k.arch.ends_with("-L6") ? 6 : k.arch.ends_with("-L8") ? 8 : 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.vocab_size = 256;
  c.model.max_seq_len = 64;
  if (c.model.arch == "llama") c.model.n_kv_head = 2;
  if (k.arch.starts_with("llama-moe")) {
    c.model.moe.n_experts = 4;
    c.model.moe.top_k = 2;
    c.model.moe.intermediate_size = 96;
    c.model.moe.every = k.arch == "llama-moe1" ? 1 : 2;
    c.model.moe.n_shared_experts = 1;
    c.model.moe.shared_intermediate_size = 160;  // wider than the dense MLP: the scratch follows it
    c.model.moe.shared_expert_gate = true;
    c.model.moe.aux_loss_coef = 0.01;
    c.parallel.ep = k.ep;
    c.model.moe.capacity_factor = k.capacity;
  }
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.dp = k.dp;
  c.parallel.zero_stage = k.zero;
  c.parallel.schedule = k.schedule;
  c.parallel.dp_sync = k.dp_sync;
  c.parallel.ps_sparse_embedding = k.sparse;
  c.parallel.grad_reduce_dtype = k.grad_reduce_dtype;
  c.parallel.micro_batch_size = k.micro_batch_size;
  c.training.recompute = k.recompute;
  c.training.recompute_layers = k.recompute_layers;
  c.parallel.offload_optimizer = k.offload;
  c.parallel.sequence_parallel = k.sequence_parallel;
  c.parallel.cp = k.cp;
  c.parallel.virtual_stages = k.virtual_stages;
  c.parallel.bucket_mb = 0.05;  // several buckets per stage, so ZeRO 2's staging slots are bucket-sized
  c.training.batch_size = 16;
  c.training.seq_len = 32;
  c.training.threads = 1;
  c.data.train = corpus + "/train_*.bin";
  if (k.document_mask) {
    c.data.document_mask = true;
    c.data.eos_id = ' ';
  }
  if (!k.lora_base.empty()) {
    c.lora.rank = 4;
    c.lora.targets = c.model.arch == "llama" ? std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"}
                                             : std::vector<std::string>{"qkv", "proj", "fc", "fc_proj"};
    c.lora.base_dtype = k.lora_base.substr(0, k.lora_base.find('-'));
    c.lora.double_quant = k.lora_base.ends_with("-dq");
    c.lora.dropout = k.lora_dropout;
  }
  return c;
}

std::string label(const Case& k, int micro_batches) {
  return LayoutChoice{k.tp, k.pp, k.dp, k.zero, k.micro_batch_size, micro_batches}.name() +
         (k.dp_sync == "parameter-server" ? (k.sparse ? " ps-sparse" : " ps") : "") +
         (k.schedule != "1f1b" ? " " + k.schedule : "") + (k.grad_reduce_dtype == "bf16" ? " bf16-grads" : "") +
         (k.recompute != "none" ? " rc-" + k.recompute + (k.recompute_layers ? std::to_string(k.recompute_layers) : "")
                                : "") +
         (k.offload ? " offload" : "") + (k.sequence_parallel ? " sp" : "") +
         (k.cp > 1 ? " cp" + std::to_string(k.cp) : "") +
         (k.virtual_stages > 1 ? " v" + std::to_string(k.virtual_stages) : "") +
         (k.lora_base.empty() ? "" : " lora-" + k.lora_base) + (k.lora_dropout > 0 ? " dropout" : "") +
         (k.document_mask ? " docs" : "") + (k.ep > 1 ? " ep" + std::to_string(k.ep) : "") +
         (k.capacity > 0 ? " capacity" : "");
}

double relative_error(double planned, double real) {
  if (real == 0) return planned == 0 ? 0 : 1;
  return std::abs(planned - real) / real;
}

TEST(PlanMemory, MatchesWhatTheTrainerReportsOnEveryRank) {
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  ASSERT_EQ(world, 4) << "the layouts below are for 4 ranks";
  const std::string corpus = testing::make_shared_corpus("feast_plan_memory");
  std::vector<Case> cases;
  for (const char* arch : {"gpt2", "llama"}) {
    cases.push_back({arch, 2, 2, 1, 0});
    cases.push_back({arch, 1, 4, 1, 0, "gpipe", 1});  // 16 micro-batches, all in flight on every stage
    cases.push_back({arch, 1, 4, 1, 0, "1f1b", 1});   // 4, 3, 2, 1 in flight
    for (int zero = 0; zero <= 2; ++zero) {
      cases.push_back({arch, 1, 2, 2, zero});
      cases.push_back({arch, 1, 1, 4, zero});
      cases.push_back({arch, 2, 1, 2, zero});
    }
    cases.push_back({arch, 1, 2, 2, 0, "1f1b", 2, "parameter-server"});
    cases.push_back({arch, 1, 1, 4, 0, "1f1b", 2, "parameter-server"});
  }
  cases.push_back({"llama", 2, 1, 2, 0, "1f1b", 2, "parameter-server", true});
  // Activation recomputation: what each slot keeps, and the set recomputed blocks share; for
  // every block and for the first of each stage; with the most micro-batches in flight.
  for (const char* arch : {"gpt2", "llama"})
    for (const char* mode : {"selective", "full"}) {
      cases.push_back({arch, 1, 4, 1, 0, "gpipe", 1, "allreduce", false, "fp32", mode});
      cases.push_back({arch, 2, 2, 1, 0, "1f1b", 2, "allreduce", false, "fp32", mode, 1});
      cases.push_back({arch, 1, 1, 4, 1, "1f1b", 2, "allreduce", false, "fp32", mode});
    }
  // ZeRO 3: the parameter pages a step holds at most (its shard, two neighbouring steps' units),
  // with six layers so that blocks come and go, alone and with recomputation and offload.
  cases.push_back({"gpt2-L6", 1, 1, 4, 3, "1f1b", 2});
  cases.push_back({"llama-L6", 1, 2, 2, 3, "1f1b", 1});
  cases.push_back({"llama-L6", 2, 1, 2, 3, "1f1b", 2, "allreduce", false, "fp32", "full", 0, true});
  // The optimizer offloaded: nothing of its state on the device, its host bytes as planned.
  cases.push_back({"gpt2", 1, 1, 4, 1, "1f1b", 2, "allreduce", false, "fp32", "none", 0, true});
  cases.push_back({"llama", 2, 2, 1, 0, "1f1b", 2, "allreduce", false, "fp32", "full", 0, true});
  cases.push_back({"llama", 1, 2, 2, 2, "1f1b", 2, "allreduce", false, "fp32", "selective", 0, true});
  // Sequence parallelism: the regions' rows split over tp 2 and 4, with pipeline stages, ZeRO
  // and both recomputation modes.
  for (const char* arch : {"gpt2", "llama"}) {
    Case a{arch, 2, 2, 1, 0};
    a.sequence_parallel = true;
    cases.push_back(a);
    // (the llama here has two key/value heads: tp 2 at most)
    Case b = std::string(arch) == "gpt2" ? Case{arch, 4, 1, 1, 0, "1f1b", 2, "allreduce", false, "fp32", "selective"}
                                         : Case{arch, 2, 1, 2, 1, "1f1b", 2, "allreduce", false, "fp32", "selective"};
    b.sequence_parallel = true;
    cases.push_back(b);
    Case c{arch, 2, 1, 2, 2, "1f1b", 2, "allreduce", false, "fp32", "full", 1};
    c.sequence_parallel = true;
    cases.push_back(c);
  }
  // Zero-bubble: p slots on every stage, each keeping the output gradients of its products and
  // norms between the two halves of its backward; with sequence parallelism and ZeRO too.
  for (const char* arch : {"gpt2", "llama"}) {
    cases.push_back({arch, 1, 4, 1, 0, "zero-bubble", 1});
    Case z{arch, 2, 2, 1, 0, "zero-bubble"};
    z.sequence_parallel = true;
    cases.push_back(z);
    cases.push_back({arch, 1, 2, 2, 2, "zero-bubble"});
  }
  // Context parallelism: each rank's share of the sequence, the log-sum-exp as the attention's
  // state, the ring's buffers; ZeRO sharded over dp x cp; with tp, sp, pp and recomputation.
  for (const char* arch : {"gpt2", "llama"}) {
    Case a{arch, 1, 1, 1, 0};
    a.cp = 4;
    cases.push_back(a);
    Case b{arch, 2, 1, 1, 0, "1f1b", 2, "allreduce", false, "fp32", "selective"};
    b.cp = 2;
    b.sequence_parallel = true;
    cases.push_back(b);
    Case c{arch, 1, 2, 1, 0, "zero-bubble"};
    c.cp = 2;
    cases.push_back(c);
    Case d{arch, 1, 1, 2, 2, "1f1b", 2, "allreduce", false, "fp32", "full"};
    d.cp = 2;
    cases.push_back(d);
  }
  // Interleaved 1F1B: each chunk's blocks keep their own slots and each chunk its own inputs;
  // uneven stages (6 layers over 2 stages: 4 and 2), with tp and dp and ZeRO.
  for (const char* arch : {"gpt2", "llama-L6"}) {
    Case a{arch, 1, 2, 2, 1, "interleaved-1f1b"};
    a.virtual_stages = 2;
    cases.push_back(a);
    Case b{arch, 2, 2, 1, 0, "interleaved-1f1b"};
    b.virtual_stages = 2;
    cases.push_back(b);
  }
  Case deep{"gpt2-L8", 1, 4, 1, 0, "interleaved-1f1b"};
  deep.virtual_stages = 2;
  cases.push_back(deep);
  // LoRA: the adapters' gradients and state, the frozen base among the parameters; its block
  // weights in bfloat16 or NF4 (single and double quantized scales) with their scratch.
  for (const char* arch : {"gpt2", "llama"})
    for (const char* base : {"auto", "bf16", "nf4", "nf4-dq"}) {
      Case a{arch, 2, 2, 1, 0};
      a.lora_base = base;
      cases.push_back(a);
    }
  Case lora_zero{"llama", 1, 1, 4, 2};
  lora_zero.lora_base = "nf4";
  cases.push_back(lora_zero);
  Case docs{"gpt2-L8", 1, 4, 1, 0, "interleaved-1f1b"};  // positions in every chunk's slots
  docs.virtual_stages = 2;
  docs.document_mask = true;
  cases.push_back(docs);
  for (const char* arch : {"gpt2", "llama"}) {  // dropout: down's input is the MLP's rank-local width
    Case d{arch, 2, 2, 1, 0};
    d.lora_base = "auto";
    d.lora_dropout = 0.1;
    cases.push_back(d);
  }
  // Mixtures of experts: the router's and the routed rows' buffers in place of the dense MLP's,
  // kept whatever the recomputation; the shared experts' MLP; expert parallelism's buffers for
  // every ep rank's rows, its ep rank's experts only, and ZeRO's shards over the dp / ep ranks
  // holding the same experts (none at ep = dp); MoE blocks among dense ones and alone.
  cases.push_back({"llama-moe", 2, 2, 1, 0});
  cases.push_back({"llama-moe", 1, 2, 2, 1, "gpipe", 2, "allreduce", false, "fp32", "selective"});
  cases.push_back({"llama-moe1", 2, 1, 2, 0, "1f1b", 2, "allreduce", false, "fp32", "full", 1});
  {
    Case a{"llama-moe", 1, 1, 4, 2};
    a.ep = 2;
    cases.push_back(a);
    Case b{"llama-moe1", 2, 1, 2, 1, "1f1b", 2, "allreduce", false, "fp32", "selective"};
    b.ep = 2;
    cases.push_back(b);
    Case c{"llama-moe", 1, 1, 4, 3};
    c.ep = 4;
    cases.push_back(c);
    Case d{"llama-moe", 1, 1, 4, 3};  // ZeRO 3 over the 2 ranks holding the same experts
    d.ep = 2;
    cases.push_back(d);
    Case e{"llama-moe", 1, 1, 4, 1};  // a capacity bounds the rows the experts may take
    e.ep = 4;
    e.capacity = 1.0;
    cases.push_back(e);
  }
  // Gradients travelling in bf16: the wire buffers count.
  for (int zero = 0; zero <= 2; ++zero) cases.push_back({"gpt2", 1, 1, 4, zero, "1f1b", 2, "allreduce", false, "bf16"});
  double worst = 0;
  if (me == 0)
    std::printf("%-6s %-36s %4s %5s | %-39s | %-39s | %s\n", "arch", "layout", "rank", "stage",
                "trainer: params grads optim activ (KiB)", "plan: params grads optim activ (KiB)", "max err");
  for (const Case& k : cases) {
    const Config c = case_config(k, corpus);
    std::unique_ptr<TrainingRun> run;
    {
      const log::Quiet quiet;
      auto comm = make_mpi_world(std::chrono::milliseconds(60'000));
      const LayoutPlan layout = check_run(c, comm->size());
      run = std::make_unique<TrainingRun>(c, layout, std::move(comm));
    }
    const MemoryBytes real = run->memory_bytes();
    const PlannedMemory plan = rank_memory(c, run->plan(), me, {PlanDType::kFp32, run->inferred().threads});
    const double parts_real[6] = {real.parameters,  real.gradients, real.optimizer,
                                  real.activations, real.workspace, real.communication};
    const double parts_plan[6] = {plan.parameters,  plan.gradients, plan.optimizer,
                                  plan.activations, plan.workspace, plan.communication};
    const char* names[6] = {"parameters", "gradients", "optimizer", "activations", "workspace", "communication buffers"};
    double err = relative_error(plan.reported(), real.total());
    EXPECT_LE(relative_error(plan.offloaded, real.offloaded), 0.05)
        << k.arch << " " << label(k, run->plan().micro_batches) << " rank " << me << ": offloaded bytes planned "
        << plan.offloaded << ", the trainer holds " << real.offloaded;
    EXPECT_EQ(real.offloaded > 0, k.offload);
    EXPECT_LE(relative_error(plan.activations_per_micro_batch, real.activations_per_micro_batch), 0.05)
        << k.arch << " " << label(k, run->plan().micro_batches) << " rank " << me << ": activations per micro-batch planned "
        << plan.activations_per_micro_batch << " bytes, the trainer keeps " << real.activations_per_micro_batch;
    for (int i = 0; i < 6; ++i) {
      EXPECT_LE(relative_error(parts_plan[i], parts_real[i]), 0.05)
          << k.arch << " " << label(k, run->plan().micro_batches) << " rank " << me
          << ": " << names[i] << " planned " << parts_plan[i] << " bytes, the trainer holds " << parts_real[i];
      err = std::max(err, relative_error(parts_plan[i], parts_real[i]));
    }

    // Rank 0 prints every rank's numbers and checks the layout's figure: its largest rank.
    // Printed as four columns: activations with the workspace and communication buffers.
    double mine[9] = {parts_real[0], parts_real[1], parts_real[2], parts_real[3] + parts_real[4] + parts_real[5],
                      parts_plan[0], parts_plan[1], parts_plan[2], parts_plan[3] + parts_plan[4] + parts_plan[5], err};
    std::vector<double> all(9 * size_t(world));
    MPI_Gather(mine, 9, MPI_DOUBLE, all.data(), 9, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (me == 0) {
      const LayoutEstimate est = estimate_layout(c, run->plan(), PlanOptions{Cluster{}, {PlanDType::kFp32, 1}});
      double largest_real = 0;
      for (int r = 0; r < world; ++r) {
        const double* v = all.data() + 9 * r;
        largest_real = std::max(largest_real, v[0] + v[1] + v[2] + v[3]);
        worst = std::max(worst, v[8]);
        std::printf("%-6s %-36s %4d %5d | %8.1f %8.1f %8.1f %9.1f   | %8.1f %8.1f %8.1f %9.1f   | %.2e\n",
                    k.arch.c_str(), label(k, run->plan().micro_batches).c_str(),
                    r, run->plan().layout.coord(r).pp, v[0] / 1024, v[1] / 1024, v[2] / 1024, v[3] / 1024,
                    v[4] / 1024, v[5] / 1024, v[6] / 1024, v[7] / 1024, v[8]);
      }
      EXPECT_LE(relative_error(est.memory.reported(), largest_real), 0.05)
          << k.arch << " " << label(k, run->plan().micro_batches) << ": the plan's memory per GPU is " << est.memory.reported()
          << " bytes, the largest rank holds " << largest_real;
    }
  }
  if (me == 0) std::printf("largest relative error of any part on any rank: %.2e\n", worst);
}

}  // namespace
}  // namespace feast
