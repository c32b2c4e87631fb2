// Same math at any layout (design invariant 4): a small model of each family trained for 10 steps
// at a parallel layout (tp, pp, dp, ZeRO stage 0 to 3, schedule, micro-batch split, stage split,
// axis order) must match the single-rank run of the same model and global batch: every step's loss,
// global gradient norm and each tensor's gradient norm within 1e-5 relative, the validation
// losses (evaluated at steps 5 and 10) likewise, and every final weight within 1e-4. Each run
// also checks that replicated tensors stay bit-identical across tensor-parallel ranks and that
// the two copies of a tied embedding (first and last stage) stay bit-identical; one layout per
// world size is trained twice and must repeat bit for bit.
//
// Runs under mpirun; every rank trains the single-rank references itself (in a group of one)
// and checks its own slice of the parallel run through the parameter table's logical indices.
// With FEAST_EQUIVALENCE=full it runs the full grid (scripts/parallel_grid.sh); by default the
// subset CI runs: every layout of the world size once per family, plus the special cases.
// FEAST_EQUIVALENCE_CASES=TEXT runs only the cases whose description contains TEXT.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/log.h"
#include "model/decoder_stage.h"
#include "model/lora.h"
#include "comm/layout.h"
#include "comm/mpi_world.h"
#include "tests/support/mpi_test_support.h"
#include "comm/self_communicator.h"
#include "train/train_loop.h"

namespace feast {
namespace {

using testing::world_rank;
using testing::world_size;
bool full_grid() {
  const char* v = std::getenv("FEAST_EQUIVALENCE");
  return v && std::string(v) == "full";
}

// A directory every rank agrees on, with a synthetic corpus.
const std::string& data_dir() {
  static const std::string dir = testing::make_shared_corpus("feast_equiv");
  return dir;
}

// The models: GPT-2 (tied head, learned positions) and Llama (8 query heads sharing 4
// key/value heads, untied head, rotary), and variants with a padded vocabulary (300 pads to 384,
// so tp ranks hold padded rows) and with layer counts that do not divide by pp = 4 (or, 10, into
// equal interleaved chunks over 4 stages).
ModelConfig model(const std::string& name) {
  ModelConfig c;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 256;
  c.max_seq_len = 32;
  if (name.rfind("llama", 0) == 0) {
    c.arch = "llama";
    c.n_head = 8;
    c.n_kv_head = 4;
    c.intermediate_size = 96;
  }
  // Mixtures of experts: blocks 1 and 3 of 4 experts (top 2, not renormalised) with a gated
  // shared expert and the z-loss; -aux adds the load-balancing loss, -cap a capacity of 1.
  if (name.find("-moe") != std::string::npos) {
    c.moe.n_experts = 4;
    c.moe.top_k = 2;
    c.moe.intermediate_size = 48;
    c.moe.every = 2;
    c.moe.n_shared_experts = 1;
    c.moe.shared_expert_gate = true;
    c.moe.norm_topk_prob = false;
    c.moe.z_loss_coef = 1e-3;
    if (name.ends_with("-aux")) c.moe.aux_loss_coef = 0.01;
    // Many small experts: a bucket holds several experts' ranges (ZeRO 2 stages a few at a time).
    if (name.find("-moe16") != std::string::npos) {
      c.moe.n_experts = 16;
      c.moe.intermediate_size = 16;
    }
    if (name.ends_with("-cap")) c.moe.capacity_factor = 1.0;
  }
  if (name.ends_with("-v300")) c.vocab_size = 300;
  if (name.ends_with("-L5")) c.n_layer = 5;
  if (name.ends_with("-L6")) c.n_layer = 6;
  if (name.ends_with("-L10")) c.n_layer = 10;
  return c;
}

struct Case {
  std::string model;
  int tp, pp, dp, zero;
  const char* schedule;
  int micro_batch_size;
  const char* order = "tp-dp-pp";
  std::vector<int> stage_layers = {};
  std::string recompute = "none";
  int recompute_layers = 0;
  bool offload = false;  // parallel.offload_optimizer
  bool sequence_parallel = false;
  int cp = 1;  // parallel.cp
  int virtual_stages = 1;  // parallel.virtual_stages (interleaved-1f1b)
  int ep = 1;              // parallel.ep
  int batch() const { return dp == 3 ? 12 : 8; }  // global batch in sequences (divisible by dp * mbs)
};

std::string describe(const Case& c) {
  std::string s = c.model + " tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " dp" +
                  std::to_string(c.dp) + " zero" + std::to_string(c.zero) + " " + c.schedule + " mbs" +
                  std::to_string(c.micro_batch_size) + " " + c.order;
  if (!c.stage_layers.empty()) s += " stages " + format_list(c.stage_layers);
  if (c.recompute != "none")
    s += " recompute " + c.recompute + (c.recompute_layers ? " x" + std::to_string(c.recompute_layers) : "");
  if (c.offload) s += " offload";
  if (c.sequence_parallel) s += " sp";
  if (c.cp > 1) s += " cp" + std::to_string(c.cp);
  if (c.virtual_stages > 1) s += " v" + std::to_string(c.virtual_stages);
  if (c.ep > 1) s += " ep" + std::to_string(c.ep);
  return s;
}

Config base_config(const std::string& model_name, int batch) {
  Config c;
  c.model = model(model_name);
  c.training.seq_len = 16;
  c.training.steps = 10;
  c.training.batch_size = batch;
  c.training.lr = 1e-3;
  c.training.warmup_steps = 2;
  c.training.lr_schedule = "constant";
  c.training.eval_interval = 5;
  c.training.eval_batches = 6;
  c.training.threads = 1;
  c.parallel.micro_batch_size = batch;
  // The load-balancing loss and an expert's capacity are a micro-batch's: those models' runs
  // compare micro-batches of one sequence.
  if (model_name.ends_with("-moe-aux") || model_name.ends_with("-moe-cap")) c.parallel.micro_batch_size = 1;
  c.parallel.bucket_mb = 0.05;  // several buckets per stage, so bucketing is exercised
  c.data.train = data_dir() + "/train_*.bin";
  c.data.val = data_dir() + "/val_*.bin";
  // Every rank's, one per model: a job's ranks see one checkpoint.dir, and a run directory
  // refuses a run of another model.
  c.logging.dir = data_dir() + "/run_" + model_name;
  c.logging.interval = 1000;
  // LoRA on every product of the family over the frozen (seed-initialised) model; QLoRA: its
  // block weights in NF4 with double-quantized scales, each rank keeping its slice of every block.
  if (model_name.ends_with("-lora") || model_name.ends_with("-qlora") || model_name.ends_with("-lora-dropout")) {
    c.lora.rank = 4;
    c.lora.alpha = 8;
    for (const LoraTarget& t : lora_targets(c.model)) c.lora.targets.push_back(t.name);
  }
  // LoRA dropout: every layout must drop the same elements of the same rows (the row-parallel
  // products' inputs are split by columns over tp, the rows over micro-batches and dp).
  if (model_name.ends_with("-lora-dropout")) c.lora.dropout = 0.25;
  if (model_name.ends_with("-qlora")) {
    c.lora.base_dtype = "nf4";
    c.lora.double_quant = true;
  }
  // Document masks: the corpus's spaces end documents (one character in about eight), so most
  // windows hold several; positions restart after each, and the target after one is not counted.
  if (model_name.ends_with("-docs")) {
    c.data.document_mask = true;
    c.data.eos_id = ' ';
  }
  return c;
}

// What one run produced, as every rank sees it.
struct Outcome {
  TrainSummary summary;
  std::vector<std::vector<std::pair<std::string, double>>> tensor_norms;  // per step
};

// The single-rank run: losses, norms and every logical tensor's final values.
struct Reference {
  Outcome outcome;
  std::map<std::string, std::vector<float>> weights;
};

const Reference& reference(const std::string& model_name, int batch) {
  static std::map<std::string, Reference> cache;
  const std::string key = model_name + "/" + std::to_string(batch);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Reference& r = cache[key];
  TrainHooks hooks;
  hooks.after_step = [&](TrainingRun& run, const StepResult&) {
    r.outcome.tensor_norms.push_back(run.gradient_norms_per_tensor());
  };
  hooks.at_end = [&](TrainingRun& run) {
    for (const LocalParam& p : run.stage().table().params()) r.weights[p.spec->name] = read_parameter(run.stage(), p);
  };
  const log::Quiet quiet;  // the test prints one line per run, not each run's progress
  Config c = base_config(model_name, batch);
  // Every rank runs it, at once, each in its own directory.
  c.logging.dir = data_dir() + "/reference_" + model_name + "_" + std::to_string(world_rank());
  r.outcome.summary = train(c, make_self_communicator(), hooks);
  return r;
}

// A hash of every rank's parameters, for the repeatability check.
uint64_t hash_parameters(PipelineStage& stage) {
  uint64_t h = 1469598103934665603ull;
  for (const LocalParam& p : stage.table().params())
    for (float v : read_parameter(stage, p)) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      h = (h ^ bits) * 1099511628211ull;
    }
  return h;
}

struct RunChecks {
  double worst_weight = 0;
  std::string worst_name;
  bool replicated_identical = true;
  bool tied_identical = true;
  std::vector<uint64_t> hashes;
};

Outcome run_case(const Case& k, RunChecks& checks) {
  const Reference& ref = reference(k.model, k.batch());
  Config c = base_config(k.model, k.batch());
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.dp = k.dp;
  c.parallel.zero_stage = k.zero;
  c.parallel.schedule = k.schedule;
  c.parallel.micro_batch_size = k.micro_batch_size;
  c.parallel.order = k.order;
  c.parallel.stage_layers = k.stage_layers;
  c.training.recompute = k.recompute;
  c.training.recompute_layers = k.recompute_layers;
  c.parallel.offload_optimizer = k.offload;
  c.parallel.sequence_parallel = k.sequence_parallel;
  c.parallel.cp = k.cp;
  c.parallel.virtual_stages = k.virtual_stages;
  c.parallel.ep = k.ep;
  const ParallelLayout layout(k.tp, k.pp, k.dp, k.order, k.cp);
  Outcome out;
  TrainHooks hooks;
  hooks.after_step = [&](TrainingRun& run, const StepResult&) {
    out.tensor_norms.push_back(run.gradient_norms_per_tensor());
  };
  hooks.at_end = [&](TrainingRun& run) {
    PipelineStage& stage = run.stage();
    for (const LocalParam& p : stage.table().params()) {
      const std::vector<float>& full = ref.weights.at(p.logical->name);
      const std::vector<float> mine = read_parameter(stage, p);
      for (size_t i = 0; i < p.numel; ++i) {
        const double d = std::abs(double(mine[i]) - full[size_t(p.logical_index(int64_t(i)))]);
        if (d > checks.worst_weight) {
          checks.worst_weight = d;
          checks.worst_name = p.spec->name;
        }
      }
    }
    // Replicated tensors (norms, row-parallel biases, positions) must stay identical on every
    // tensor-parallel rank: compare each with the group's maximum and minimum.
    const int me = world_rank();
    MPI_Comm tp_group;
    MPI_Comm_split(MPI_COMM_WORLD, layout.tp_group(me)[0], me, &tp_group);
    for (const LocalParam& p : stage.table().params()) {
      if (p.spec->split != TpSplit::kReplicated) continue;
      std::vector<float> mine = read_parameter(stage, p), hi(mine.size()), lo(mine.size());
      MPI_Allreduce(mine.data(), hi.data(), int(p.numel), MPI_FLOAT, MPI_MAX, tp_group);
      MPI_Allreduce(mine.data(), lo.data(), int(p.numel), MPI_FLOAT, MPI_MIN, tp_group);
      if (hi != mine || lo != mine) checks.replicated_identical = false;
    }
    MPI_Comm_free(&tp_group);
    // The first stage's embedding and the last stage's tied copy must be the same bits.
    const std::vector<int> pair = layout.embedding_group(me);
    for (const LocalParam& p : stage.table().params()) {
      if (!p.tied_across_stages || pair.size() != 2) continue;
      std::vector<float> mine = read_parameter(stage, p), theirs(mine.size());
      const int peer = pair[0] == me ? pair[1] : pair[0];
      MPI_Sendrecv(mine.data(), int(mine.size()), MPI_FLOAT, peer, 77, theirs.data(), int(theirs.size()), MPI_FLOAT,
                   peer, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (std::memcmp(mine.data(), theirs.data(), mine.size() * sizeof(float)) != 0) checks.tied_identical = false;
    }
    const uint64_t h = hash_parameters(stage);
    checks.hashes.assign(size_t(world_size()), 0);
    MPI_Allgather(&h, 1, MPI_UINT64_T, checks.hashes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  };
  const log::Quiet quiet;
  out.summary = train(c, make_mpi_world(std::chrono::milliseconds(120'000)), hooks);
  return out;
}

bool close(double a, double b, double rel, double abs = 0) { return std::abs(a - b) <= rel * std::abs(b) + abs; }


void check_case(const Case& k) {
  const Reference& ref = reference(k.model, k.batch());
  RunChecks checks;
  const Outcome out = run_case(k, checks);
  const TrainSummary& s = out.summary;
  const TrainSummary& r = ref.outcome.summary;
  EXPECT_TRUE(checks.replicated_identical) << describe(k) << ": a replicated tensor differs across tensor-parallel ranks";
  EXPECT_TRUE(checks.tied_identical) << describe(k) << ": the two copies of the tied embedding differ";
  ASSERT_EQ(s.losses.size(), r.losses.size());
  double worst_loss = 0, worst_norm = 0, worst_tensor_norm = 0;
  std::string worst_tensor;
  auto relative = [](double a, double b, double slack) { return std::abs(a - b) / (std::abs(b) + slack); };
  for (size_t i = 0; i < r.losses.size(); ++i) {
    // The first step differs only by the order of floating-point sums; training then amplifies
    // those differences (AdamW turns rounding noise in near-zero gradients into lr-sized
    // steps), so later steps get looser bounds, and a single tensor's norm, summed over fewer
    // elements, a looser one than the global norm. A tensor whose true gradient is zero carries
    // only rounding noise: its norm may differ by a millionth of the global norm.
    const double rel = i == 0 ? 1e-6 : 1e-5, tensor_rel = i == 0 ? 1e-6 : 1e-4;
    const double slack = 1e-6 * r.grad_norms[i];
    const std::string at = describe(k) + ", step " + std::to_string(i + 1);
    EXPECT_PRED4(close, s.losses[i], r.losses[i], rel, 0.0) << at << ": loss";
    EXPECT_PRED4(close, s.grad_norms[i], r.grad_norms[i], rel, 0.0) << at << ": gradient norm";
    ASSERT_EQ(s.val_losses[i].has_value(), r.val_losses[i].has_value()) << at;
    if (r.val_losses[i]) {
      EXPECT_PRED4(close, *s.val_losses[i], *r.val_losses[i], rel, 0.0) << at << ": validation loss";
    }
    worst_loss = std::max(worst_loss, relative(s.losses[i], r.losses[i], 0));
    worst_norm = std::max(worst_norm, relative(s.grad_norms[i], r.grad_norms[i], 0));
    const auto& mine = out.tensor_norms[i];
    const auto& theirs = ref.outcome.tensor_norms[i];
    ASSERT_EQ(mine.size(), theirs.size());
    for (size_t t = 0; t < mine.size(); ++t) {
      ASSERT_EQ(mine[t].first, theirs[t].first);
      EXPECT_PRED4(close, mine[t].second, theirs[t].second, tensor_rel, slack)
          << at << ": gradient norm of " << mine[t].first;
      const double d = relative(mine[t].second, theirs[t].second, slack);
      if (d > worst_tensor_norm) {
        worst_tensor_norm = d;
        worst_tensor = mine[t].first;
      }
    }
  }
  double worst_all = checks.worst_weight;
  MPI_Allreduce(MPI_IN_PLACE, &worst_all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank() == 0)
    std::printf("equivalence %-46s loss %.1e norm %.1e tensor %.1e (%s) weight %.1e; loss %.4f..%.4f\n",
                describe(k).c_str(), worst_loss, worst_norm, worst_tensor_norm, worst_tensor.c_str(), worst_all,
                s.losses.front(), s.losses.back());
  EXPECT_LE(checks.worst_weight, 1e-4) << describe(k) << ": worst weight difference in " << checks.worst_name;
}

// Run k gave the losses, gradient norms, validation losses and parameters of the reference run
// `than`, bit for bit.
void expect_bit_identical(const Case& k, const Outcome& out, const RunChecks& checks, const Outcome& ref,
                          const RunChecks& ref_checks, const std::string& than) {
  EXPECT_EQ(out.summary.losses, ref.summary.losses) << describe(k);
  EXPECT_EQ(out.summary.grad_norms, ref.summary.grad_norms) << describe(k);
  EXPECT_EQ(out.summary.val_losses, ref.summary.val_losses) << describe(k);
  EXPECT_EQ(checks.hashes, ref_checks.hashes) << describe(k) << ": parameters differ from " << than;
  if (world_rank() == 0)
    std::printf("%-72s bit-identical to %s: %s\n", describe(k).c_str(), than.c_str(),
                out.summary.losses == ref.summary.losses && checks.hashes == ref_checks.hashes ? "yes" : "NO");
}

// The layouts of this world size, each trained at every ZeRO stage (only 0 at dp 1, where 1
// and 2 are the same run), both schedules (only 1F1B at pp 1, where they are the same run) and
// micro-batches of 1 and 2 sequences; in the CI subset once each, rotating the ZeRO stage.
std::vector<Case> cases() {
  std::vector<Case> out;
  const int n = world_size();
  int rotate = 0;
  for (const char* family : {"gpt2", "llama"})
    for (int tp : {1, 2, 4})
      for (int pp : {1, 2, 4})
        for (int dp : {1, 2, 3, 4}) {
          if (tp * pp * dp != n) continue;
          std::vector<int> zeros = {0};
          if (dp > 1) zeros = {0, 1, 2, 3};
          std::vector<const char*> schedules = {"1f1b"};
          if (pp > 1) schedules.push_back("gpipe");
          if (pp > 1) schedules.push_back("zero-bubble");
          if (!full_grid()) {
            zeros = {dp > 1 ? 1 + rotate++ % 3 : 0};
            schedules = {pp > 1 && (tp + dp) % 2 == 0 ? "gpipe" : "1f1b"};
          }
          // The full grid also runs every layout with tp > 1 again with sequence parallelism.
          const std::vector<bool> sps = full_grid() && tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false};
          for (int zero : zeros)
            for (const char* sched : schedules)
              for (int mbs : full_grid() ? std::vector<int>{1, 2} : std::vector<int>{1})
                for (bool sp : sps) {
                  Case k{family, tp, pp, dp, zero, sched, mbs};
                  k.sequence_parallel = sp;
                  out.push_back(k);
                }
        }
  // Special cases, in CI too: a padded vocabulary split over tp 2 and 4, layer counts that do
  // not divide by four stages (and an explicit split), and rank numbering under every axis order.
  for (const char* family : {"gpt2-v300", "llama-v300"}) {
    if (n == 2) out.push_back({family, 2, 1, 1, 0, "1f1b", 2});
    if (n == 4) out.push_back({family, 4, 1, 1, 0, "1f1b", 1});
    if (n == 8) out.push_back({family, 2, 2, 2, 2, "1f1b", 1});
    if (n == 8) out.push_back({family, 4, 1, 2, 1, "1f1b", 2});
  }
  // ZeRO 3 where stages hold enough blocks that only some are gathered at a time: six layers
  // over one or two stages, with tensor parallelism and GPipe's many micro-batches in flight.
  if (n == 2) out.push_back({"gpt2-L6", 1, 1, 2, 3, "1f1b", 2});
  if (n == 8) out.push_back({"llama-L6", 2, 2, 2, 3, "gpipe", 1});
  if (n == 4) {
    out.push_back({"gpt2-L5", 1, 4, 1, 0, "1f1b", 1});
    out.push_back({"llama-L6", 1, 4, 1, 0, "gpipe", 2});
    out.push_back({"gpt2-L6", 1, 4, 1, 0, "1f1b", 2, "tp-dp-pp", {1, 2, 2, 1}});
  }
  if (n == 8) {
    out.push_back({"llama-L5", 1, 4, 2, 2, "1f1b", 1});
    out.push_back({"gpt2-L6", 2, 4, 1, 0, "1f1b", 1, "tp-dp-pp", {3, 1, 1, 1}});
    for (const char* order : {"tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"})
      out.push_back({"gpt2", 2, 2, 2, 1, "1f1b", 2, order});
  }
  // Sequence parallelism, both families: tp 2 and 4, with micro-batches of one and two
  // sequences (rows split within a sequence, and across two), with pipeline stages (activations
  // sent as each rank's rows), ZeRO and data parallelism, and with selective and full
  // recomputation (the gathers run again in the recomputed forward).
  auto sp = [](Case k) {
    k.sequence_parallel = true;
    return k;
  };
  for (const char* family : {"gpt2", "llama"}) {
    if (n == 2) out.push_back(sp({family, 2, 1, 1, 0, "1f1b", 2}));
    if (n == 4) out.push_back(sp({family, 4, 1, 1, 0, "1f1b", 1}));
    if (n == 4) out.push_back(sp({family, 2, 2, 1, 0, "1f1b", 2}));
    if (n == 8) out.push_back(sp({family, 2, 2, 2, 2, "1f1b", 1}));
    if (n == 8) out.push_back(sp({family, 4, 1, 2, 1, "gpipe", 2}));
  }
  if (n == 2) out.push_back(sp({"llama", 2, 1, 1, 0, "1f1b", 1, "tp-dp-pp", {}, "full"}));
  if (n == 4) out.push_back(sp({"gpt2-v300", 2, 1, 2, 3, "1f1b", 1, "tp-dp-pp", {}, "selective"}));
  if (n == 8) out.push_back(sp({"llama-L5", 2, 4, 1, 0, "1f1b", 2, "tp-dp-pp", {}, "full", 1}));
  // Zero-bubble at pp 2 and 4, both families, uneven stages, with tensor and sequence
  // parallelism, data parallelism and every ZeRO stage.
  for (const char* family : {"gpt2", "llama"}) {
    if (n == 2) out.push_back({family, 1, 2, 1, 0, "zero-bubble", 1});
    if (n == 4) out.push_back({family, 1, 4, 1, 0, "zero-bubble", 1});
    if (n == 8) out.push_back(sp({family, 2, 2, 2, 2, "zero-bubble", 1}));
  }
  if (n == 4) out.push_back({"llama-L5", 1, 2, 2, 1, "zero-bubble", 2});
  if (n == 4) out.push_back(sp({"gpt2-v300", 2, 2, 1, 0, "zero-bubble", 2}));
  if (n == 8) out.push_back({"gpt2-L6", 1, 4, 2, 3, "zero-bubble", 1, "tp-dp-pp", {1, 2, 2, 1}});
  // Context parallelism, both families (learned positions and rotary ones, grouped-query
  // attention): cp 2 and 4 alone, with tp 2 (and sequence parallelism), with pp 2, with data
  // parallelism and ZeRO (gradients summed over dp * cp), recomputation (the ring runs again),
  // zero-bubble (the ring in the input-gradient half) and axis orders that name cp.
  auto cp = [](Case k, int degree) {
    k.cp = degree;
    return k;
  };
  for (const char* family : {"gpt2", "llama"}) {
    if (n == 2) out.push_back(cp({family, 1, 1, 1, 0, "1f1b", 2}, 2));
    if (n == 4) out.push_back(cp({family, 1, 1, 1, 0, "1f1b", 1}, 4));
    if (n == 4) out.push_back(cp({family, 2, 1, 1, 0, "1f1b", 2}, 2));
    if (n == 4) out.push_back(cp({family, 1, 2, 1, 0, "1f1b", 1}, 2));
    if (n == 8) out.push_back(cp({family, 2, 2, 1, 0, "1f1b", 1}, 2));
    if (n == 8) out.push_back(cp(sp({family, 2, 1, 1, 0, "1f1b", 2}), 4));
  }
  if (n == 2) out.push_back(cp({"llama", 1, 1, 1, 0, "1f1b", 1, "tp-dp-pp", {}, "selective"}, 2));
  if (n == 4) out.push_back(cp({"gpt2", 1, 1, 2, 2, "1f1b", 2, "cp-dp-pp-tp"}, 2));
  if (n == 4) out.push_back(cp(sp({"llama-v300", 2, 1, 1, 0, "1f1b", 1, "tp-dp-pp", {}, "full"}), 2));
  if (n == 8) out.push_back(cp({"llama", 1, 2, 2, 3, "zero-bubble", 1, "dp-cp-tp-pp"}, 2));
  if (n == 8) out.push_back(cp(sp({"gpt2-L5", 2, 2, 1, 1, "gpipe", 2, "tp-cp-dp-pp", {}, "selective"}), 2));
  // Interleaved 1F1B at pp 2 and 4 with 2 chunks per stage (3 at pp 2 once), both families,
  // uneven stages (6 layers over 2 stages: 4 and 2; 10 over 4: 4, 2, 2, 2; an explicit 2 and 4),
  // with tensor and sequence parallelism, data parallelism and ZeRO 1 and 2, and context
  // parallelism.
  auto interleaved = [](Case k, int v) {
    k.schedule = "interleaved-1f1b";
    k.virtual_stages = v;
    return k;
  };
  if (n == 2) out.push_back(interleaved({"gpt2-L6", 1, 2, 1, 0, "", 1}, 2));
  if (n == 2) out.push_back(interleaved({"llama", 1, 2, 1, 0, "", 2}, 2));
  if (n == 4) out.push_back(interleaved({"gpt2-L10", 1, 4, 1, 0, "", 1}, 2));
  if (n == 4) out.push_back(interleaved({"llama-L10", 1, 4, 1, 0, "", 2}, 2));
  if (n == 4) out.push_back(interleaved(sp({"gpt2", 2, 2, 1, 0, "", 1}), 2));
  if (n == 4) out.push_back(interleaved({"llama-L6", 1, 2, 2, 2, "", 1}, 2));
  if (n == 4) out.push_back(interleaved({"gpt2-L6", 1, 2, 2, 1, "", 2, "tp-dp-pp", {2, 4}}, 2));
  if (n == 8) out.push_back(interleaved({"gpt2-L10", 2, 4, 1, 1, "", 1}, 2));
  if (n == 8) out.push_back(interleaved(sp({"llama", 2, 2, 2, 1, "", 1}), 2));
  if (n == 8) out.push_back(interleaved({"gpt2-L6", 1, 2, 4, 2, "", 1}, 3));
  if (n == 4) out.push_back(cp(interleaved({"llama", 1, 2, 1, 0, "", 1}, 2), 2));  // the ring in every chunk
  // LoRA over a frozen model, both families: tensor parallelism (the replicated adapter matrices'
  // gradients summed over tp) with and without sequence parallelism, pipeline stages, data
  // parallelism with ZeRO 1 and 2 (sharding the adapters alone), recomputation, context
  // parallelism and interleaving.
  if (n == 2) out.push_back({"gpt2-lora", 2, 1, 1, 0, "1f1b", 2});
  if (n == 2) out.push_back(cp({"llama-lora", 1, 1, 1, 0, "1f1b", 1, "tp-dp-pp", {}, "full"}, 2));
  if (n == 4) out.push_back(sp({"llama-lora", 2, 2, 1, 0, "1f1b", 1}));
  if (n == 4) out.push_back({"gpt2-lora", 1, 2, 2, 2, "1f1b", 1});
  if (n == 4) out.push_back(interleaved({"llama-lora", 1, 2, 2, 1, "", 1}, 2));
  if (n == 8) out.push_back({"llama-lora", 2, 2, 2, 1, "gpipe", 1, "tp-dp-pp", {}, "selective"});
  if (n == 8) out.push_back(sp({"gpt2-lora", 4, 1, 2, 2, "1f1b", 2}));
  // QLoRA: the NF4 base's blocks cut by tensor parallelism (rows of 96 straddle blocks of 64),
  // with pipeline stages, data parallelism and ZeRO.
  if (n == 4) out.push_back({"llama-qlora", 2, 2, 1, 0, "1f1b", 1});
  if (n == 8) out.push_back({"gpt2-qlora", 2, 2, 2, 1, "1f1b", 2});
  // LoRA dropout, both families: with tp (A of o/down split by input columns), sequence
  // parallelism, pp, dp with ZeRO and micro-batches of one and two sequences, and recomputation
  // (the forward drawn again).
  if (n == 2) out.push_back({"gpt2-lora-dropout", 2, 1, 1, 0, "1f1b", 2});
  if (n == 2) out.push_back({"llama-lora-dropout", 1, 1, 2, 1, "1f1b", 1});
  if (n == 4) out.push_back(sp({"llama-lora-dropout", 2, 2, 1, 0, "1f1b", 1, "tp-dp-pp", {}, "full"}));
  if (n == 4) out.push_back({"gpt2-lora-dropout", 1, 2, 2, 2, "gpipe", 1, "tp-dp-pp", {}, "selective"});
  if (n == 8) out.push_back({"llama-lora-dropout", 2, 2, 2, 1, "1f1b", 2});
  // Document masks, both families (learned positions gathered by document position; rotary ones
  // turned by it): every stage derives the positions from the tokens, so with tensor and sequence
  // parallelism, pipeline stages under each schedule, data parallelism with ZeRO (the loss's
  // denominator then counts fewer targets on some ranks than others), recomputation and
  // interleaving.
  if (n == 2) out.push_back({"gpt2-docs", 2, 1, 1, 0, "1f1b", 2});
  if (n == 2) out.push_back({"llama-docs", 1, 2, 1, 0, "zero-bubble", 1});
  if (n == 4) out.push_back(sp({"llama-docs", 2, 2, 1, 0, "gpipe", 2, "tp-dp-pp", {}, "selective"}));
  if (n == 4) out.push_back({"gpt2-docs", 1, 2, 2, 2, "1f1b", 1, "tp-dp-pp", {}, "full"});
  if (n == 4) out.push_back(interleaved({"llama-docs", 1, 2, 2, 1, "", 1}, 2));
  if (n == 8) out.push_back({"llama-docs", 2, 2, 2, 1, "1f1b", 1});
  if (n == 8) out.push_back(sp({"gpt2-docs", 2, 2, 2, 3, "zero-bubble", 2}));
  // Mixtures of experts: tensor parallelism splits every expert; the load-balancing loss's sums
  // travel along the pipeline; recomputation leaves MoE blocks whole; a capacity drops the same
  // choices at every layout.
  if (n == 2) out.push_back({"llama-moe", 2, 1, 1, 0, "1f1b", 2});
  if (n == 2) out.push_back({"llama-moe-aux", 1, 2, 1, 0, "1f1b", 1});
  if (n == 4) out.push_back({"llama-moe-aux", 2, 2, 1, 0, "1f1b", 1});
  if (n == 4) out.push_back({"llama-moe", 1, 2, 2, 1, "gpipe", 2, "tp-dp-pp", {}, "selective"});
  if (n == 4) out.push_back({"llama-moe-cap", 1, 1, 4, 2, "1f1b", 1});
  if (n == 8) out.push_back({"llama-moe-aux", 2, 2, 2, 1, "1f1b", 1, "tp-dp-pp", {}, "full"});
  // Expert parallelism: the experts' tokens travel by all-to-all to the rank that holds them and
  // back, forward and backward, beside tensor and pipeline parallelism and every ZeRO stage
  // (with ep = dp there is one rank per set of experts, and nothing to shard).
  auto with_ep = [](Case k, int ep) {
    k.ep = ep;
    return k;
  };
  if (n == 2) out.push_back(with_ep({"llama-moe-aux", 1, 1, 2, 1, "1f1b", 1}, 2));
  if (n == 4) out.push_back(with_ep({"llama-moe-aux", 1, 1, 4, 2, "1f1b", 1}, 4));
  if (n == 4) out.push_back(with_ep({"llama-moe-cap", 2, 1, 2, 0, "1f1b", 1}, 2));
  if (n == 8) out.push_back(with_ep({"llama-moe-aux", 2, 2, 2, 1, "1f1b", 1}, 2));
  if (n == 8) out.push_back(with_ep({"llama-moe", 1, 2, 4, 3, "gpipe", 2}, 4));
  if (n == 2) out.push_back({"llama-moe16", 1, 1, 2, 2, "1f1b", 2});
  if (n == 4) out.push_back(with_ep({"llama-moe16", 1, 1, 4, 2, "1f1b", 2}, 4));
  // Each rank holds its ep rank's experts only: with dp / ep > 1 ranks holding the same experts,
  // their gradients are summed over those ranks alone and ZeRO 1, 2 and 3 shard over them (under
  // ZeRO 0 too the gradient norm counts each shard's elements once).
  if (n == 4) out.push_back(with_ep({"llama-moe-aux", 1, 1, 4, 0, "1f1b", 1}, 2));
  if (n == 4) out.push_back(with_ep({"llama-moe-aux", 1, 1, 4, 1, "1f1b", 1}, 2));
  if (n == 4) out.push_back(with_ep({"llama-moe16", 1, 1, 4, 3, "1f1b", 2}, 2));
  if (n == 8) out.push_back(with_ep({"llama-moe-cap", 1, 2, 4, 2, "1f1b", 1}, 2));
  // FEAST_EQUIVALENCE_CASES=TEXT keeps the cases whose description holds TEXT (while working on one).
  if (const char* only = std::getenv("FEAST_EQUIVALENCE_CASES"))
    std::erase_if(out, [&](const Case& k) { return describe(k).find(only) == std::string::npos; });
  return out;
}

TEST(SameMathAtAnyLayout, MatchesTheSingleRankRun) {
  const std::vector<Case> all = cases();
  ASSERT_FALSE(all.empty()) << "no layout has world size " << world_size();
  for (const Case& k : all) {
    SCOPED_TRACE(describe(k));
    check_case(k);
  }
  if (world_rank() == 0)
    std::printf("equivalence: %zu distinct runs at world size %d (%s)\n", all.size(), world_size(),
                full_grid() ? "full grid" : "CI subset");
}

// The largest layout of the world size, trained twice: the same losses and parameters, bit
// for bit (the CPU path is deterministic for a fixed layout).
TEST(SameMathAtAnyLayout, RepeatsBitForBit) {
  const std::map<int, Case> by_size = {{1, {"gpt2", 1, 1, 1, 0, "1f1b", 2}},  {2, {"llama", 1, 1, 2, 2, "1f1b", 1}},
                                       {3, {"llama", 1, 1, 3, 2, "1f1b", 1}}, {4, {"gpt2", 2, 2, 1, 0, "1f1b", 1}},
                                       {6, {"llama", 2, 1, 3, 1, "1f1b", 2}}, {8, {"gpt2", 2, 2, 2, 2, "1f1b", 1}}};
  ASSERT_TRUE(by_size.count(world_size())) << "no repeatability case for world size " << world_size();
  const Case& k = by_size.at(world_size());
  RunChecks a, b;
  const Outcome first = run_case(k, a), second = run_case(k, b);
  EXPECT_EQ(first.summary.losses, second.summary.losses) << describe(k);
  EXPECT_EQ(first.summary.grad_norms, second.summary.grad_norms) << describe(k);
  EXPECT_EQ(a.hashes, b.hashes) << describe(k) << ": parameters differ between two runs";
}

// Activation recomputation, optimizer offload and ZeRO 3 change where things are kept, not what
// is computed: at a layout of each world size (tensor and pipeline parallelism and ZeRO where it
// has them), selective, full and partial (the first block of each stage) recomputation, the
// offloaded optimizer (alone and with full recomputation) and, where the layout runs ZeRO 2,
// ZeRO 3 (alone and with both) give the losses, gradient norms and parameters of the run that
// keeps everything, bit for bit.
TEST(SameMathAtAnyLayout, MemorySavingsChangeNoBit) {
  const std::map<int, Case> by_size = {{1, {"llama", 1, 1, 1, 0, "1f1b", 2}},  {2, {"gpt2", 2, 1, 1, 0, "1f1b", 2}},
                                       {3, {"gpt2-L6", 1, 1, 3, 2, "1f1b", 2}}, {4, {"llama", 2, 2, 1, 0, "1f1b", 1}},
                                       {6, {"gpt2", 2, 1, 3, 1, "1f1b", 2}},  {8, {"llama", 2, 2, 2, 2, "gpipe", 1}}};
  ASSERT_TRUE(by_size.count(world_size())) << "no case for world size " << world_size();
  const Case base = by_size.at(world_size());
  RunChecks kept_checks;
  const Outcome kept = run_case(base, kept_checks);
  struct Variant {
    std::string recompute;
    int layers;
    bool offload;
    int zero = -1;  // ZeRO 3 where the base is ZeRO 2 (the same gradients; parameters gathered)
  };
  std::vector<Variant> variants = {
      {"selective", 0, false}, {"full", 0, false}, {"full", 1, false}, {"none", 0, true}, {"full", 0, true}};
  if (base.zero == 2) {
    variants.push_back({"none", 0, false, 3});
    variants.push_back({"full", 0, true, 3});
  }
  for (const Variant& v : variants) {
    Case k = base;
    k.recompute = v.recompute;
    k.recompute_layers = v.layers;
    k.offload = v.offload;
    if (v.zero >= 0) k.zero = v.zero;
    RunChecks checks;
    const Outcome out = run_case(k, checks);
    expect_bit_identical(k, out, checks, kept, kept_checks, "the run that keeps everything");
  }
}

// Zero-bubble computes every gradient as 1F1B does, only later: at a layout of each world size
// (pipeline stages wherever the world size allows), the same losses, gradient norms and
// parameters as 1F1B, bit for bit.
TEST(SameMathAtAnyLayout, ZeroBubbleChangesNoBit) {
  const std::map<int, Case> by_size = {{1, {"gpt2", 1, 1, 1, 0, "1f1b", 2}},  {2, {"gpt2", 1, 2, 1, 0, "1f1b", 1}},
                                       {3, {"llama", 1, 3, 1, 0, "1f1b", 1}}, {4, {"llama", 2, 2, 1, 0, "1f1b", 2}},
                                       {6, {"gpt2", 1, 2, 3, 1, "1f1b", 1}},  {8, {"gpt2-L6", 1, 4, 2, 2, "1f1b", 1}}};
  ASSERT_TRUE(by_size.count(world_size())) << "no case for world size " << world_size();
  Case k = by_size.at(world_size());
  RunChecks one_f_one_b_checks, zero_bubble_checks;
  const Outcome one_f_one_b = run_case(k, one_f_one_b_checks);
  k.schedule = "zero-bubble";
  const Outcome zero_bubble = run_case(k, zero_bubble_checks);
  expect_bit_identical(k, zero_bubble, zero_bubble_checks, one_f_one_b, one_f_one_b_checks, "the 1F1B run");
}

}  // namespace
}  // namespace feast
