// Same math at any layout (design invariant 4): a small GPT-2 trained for 10 steps at a parallel
// layout (tp, pp, dp, ZeRO stage, schedule, micro-batch split) must give the single-rank run's
// per-step losses within 1e-5 relative and its final weights within 1e-4. Runs under mpirun;
// every rank trains the single-rank reference itself (in a group of one) and then checks its
// own slice of the parallel run against it element by element, through the parameter table's
// logical indices. The whole grid (tp 1/2/4 x pp 1/2/4 x dp 1/2 with tp*pp*dp = world size, ZeRO
// 0/1/2, 1F1B and GPipe, two micro-batch splits) takes about a minute over world sizes 1-8.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "model/gpt2_stage.h"
#include "parallel/layout.h"
#include "parallel/mpi_world.h"
#include "parallel/self_communicator.h"
#include "trainer/train_loop.h"

namespace feast {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A directory every rank agrees on, with the synthetic corpus rank 0 prepared in it.
const std::string& data_dir() {
  static const std::string dir = [] {
    char path[256] = {};
    if (world_rank() == 0) {
      std::snprintf(path, sizeof path, "%s", (std::filesystem::temp_directory_path() / "feast_equiv_XXXXXX").c_str());
      if (!mkdtemp(path)) std::abort();
      PrepareOptions o;
      o.out_dir = path;
      prepare_synthetic(60'000, 3, o);
    }
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    return std::string(path);
  }();
  return dir;
}

struct Case {
  int tp, pp, dp, zero;
  const char* schedule;
  int micro_batch_size;  // of a global batch of 8 sequences
  const char* order = "tp-dp-pp";
};

std::string describe(const Case& c) {
  return "tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " dp" + std::to_string(c.dp) + " zero" +
         std::to_string(c.zero) + " " + c.schedule + " mbs" + std::to_string(c.micro_batch_size) + " " + c.order;
}

Config base_config() {
  Config c;
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.vocab_size = 256;
  c.model.max_seq_len = 32;
  c.training.seq_len = 16;
  c.training.steps = 10;
  c.training.batch_size = 8;
  c.training.lr = 3e-3;
  c.training.warmup_steps = 0;
  c.training.lr_schedule = "constant";
  c.training.eval_interval = 0;
  c.training.threads = 1;
  c.parallel.micro_batch_size = 8;
  c.parallel.bucket_mb = 0.05;  // several buckets per stage, so bucketing is exercised
  c.data.train = data_dir() + "/train_*.bin";
  c.logging.dir = data_dir() + "/run_" + std::to_string(world_rank());
  c.logging.interval = 1000;
  return c;
}

// The single-rank run: losses and every logical tensor's final values.
struct Reference {
  std::vector<double> losses, grad_norms;
  std::map<std::string, std::vector<float>> weights;
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const TrainSummary s = train(base_config(), make_self_communicator(), [&](const GPT2Stage& stage) {
      for (const LocalParam& p : stage.table().params())
        r.weights[p.spec->name].assign(const_cast<GPT2Stage&>(stage).params() + p.offset,
                                       const_cast<GPT2Stage&>(stage).params() + p.offset + p.numel);
    });
    r.losses = s.losses;
    r.grad_norms = s.grad_norms;
    return r;
  }();
  return ref;
}

void check_case(const Case& k) {
  const Reference& ref = reference();
  Config c = base_config();
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.dp = k.dp;
  c.parallel.zero_stage = k.zero;
  c.parallel.schedule = k.schedule;
  c.parallel.micro_batch_size = k.micro_batch_size;
  c.parallel.order = k.order;
  const ParallelLayout layout(k.tp, k.pp, k.dp, k.order);
  double worst_weight = 0;
  std::string worst_name;
  bool replicated_identical = true;
  const TrainSummary s =
      train(c, make_mpi_world(std::chrono::milliseconds(120'000)), [&](const GPT2Stage& stage) {
        GPT2Stage& st = const_cast<GPT2Stage&>(stage);
        for (const LocalParam& p : stage.table().params()) {
          const std::vector<float>& full = ref.weights.at(p.spec->name);
          for (size_t i = 0; i < p.numel; ++i) {
            const double d = std::abs(double(st.params()[p.offset + i]) - full[size_t(p.logical_index(int64_t(i)))]);
            if (d > worst_weight) {
              worst_weight = d;
              worst_name = p.spec->name;
            }
          }
        }
        // Replicated tensors (norms, row-parallel biases, positions) must stay identical on
        // every tensor-parallel rank: compare each with the group's maximum and minimum.
        MPI_Comm tp_group;
        MPI_Comm_split(MPI_COMM_WORLD, layout.tp_group(world_rank())[0], world_rank(), &tp_group);
        for (const LocalParam& p : stage.table().params()) {
          if (p.spec->split != TpSplit::kReplicated) continue;
          const int n = int(p.numel);
          std::vector<float> mine(st.params() + p.offset, st.params() + p.offset + n), hi(mine.size()), lo(mine.size());
          MPI_Allreduce(mine.data(), hi.data(), n, MPI_FLOAT, MPI_MAX, tp_group);
          MPI_Allreduce(mine.data(), lo.data(), n, MPI_FLOAT, MPI_MIN, tp_group);
          if (hi != mine || lo != mine) replicated_identical = false;
        }
        MPI_Comm_free(&tp_group);
      });
  EXPECT_TRUE(replicated_identical) << describe(k) << ": a replicated tensor differs across tensor-parallel ranks";
  ASSERT_EQ(s.losses.size(), ref.losses.size());
  double worst_loss = 0;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(s.losses[i], ref.losses[i], 1e-5 * ref.losses[i]) << describe(k) << ": step " << i + 1;
    // The clipping norm counts every logical element once, whatever the layout.
    EXPECT_NEAR(s.grad_norms[i], ref.grad_norms[i], 1e-5 * ref.grad_norms[i]) << describe(k) << ": step " << i + 1;
    worst_loss = std::max(worst_loss, std::abs(s.losses[i] - ref.losses[i]) / ref.losses[i]);
  }
  double worst_all = worst_weight;
  MPI_Allreduce(MPI_IN_PLACE, &worst_all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank() == 0)
    std::printf("equivalence %-32s losses within %.1e relative, weights within %.1e (rank 0: %s; losses %.6f .. %.6f)\n",
                describe(k).c_str(), worst_loss, worst_all, worst_name.c_str(), s.losses.front(), s.losses.back());
  EXPECT_LE(worst_weight, 1e-4) << describe(k) << ": worst weight difference in " << worst_name;
}

// Every layout with this world size, at every ZeRO stage and schedule, with two micro-batch
// splits of the global batch of 8 sequences (1 and 2 sequences per micro-batch).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int dp : {1, 2}) {
        if (tp * pp * dp != world_size()) continue;
        for (int zero : {0, 1, 2})
          for (const char* sched : {"1f1b", "gpipe"})
            for (int mbs : {1, 2}) out.push_back({tp, pp, dp, zero, sched, mbs});
      }
  // Rank numbering must not matter either: the 3D layout under every other axis order.
  if (world_size() == 8)
    for (const char* order : {"tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"})
      out.push_back({2, 2, 2, 1, "1f1b", 2, order});
  return out;
}

TEST(SameMathAtAnyLayout, MatchesTheSingleRankRun) {
  const std::vector<Case> all = cases();
  ASSERT_FALSE(all.empty()) << "no layout has world size " << world_size();
  for (const Case& k : all) {
    SCOPED_TRACE(describe(k));
    check_case(k);
  }
}

}  // namespace
}  // namespace feast
