// Parameter-server training (parallel.dp_sync = "parameter-server") against all-reduce training:
// the same model, data and global batch trained for 10 steps must give the same loss at every
// step and the same validation losses within 1e-5 relative, at dp 2 and at tp/pp/dp mixes
// (GPT-2 with its head tied across two pipeline stages; Llama with a vocabulary-parallel
// embedding). The sparse server (parallel.ps_sparse_embedding) must give the dense server's
// losses, move fewer bytes per step, end with the same weights on every data-parallel rank, and
// resume from its checkpoints exactly. Configs that cannot work are ConfigErrors naming the keys.
//
// Runs under mpirun at 2 and 4 ranks; each world size trains the layouts that fill it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "config/validate.h"
#include "core/error.h"
#include "core/log.h"
#include "tests/support/mpi_test_support.h"
#include "comm/layout.h"
#include "comm/mpi_world.h"
#include "train/train_loop.h"

namespace feast {
namespace {

using testing::world_rank;
using testing::world_size;

const std::string& data_dir() {
  static const std::string dir = testing::make_shared_corpus("feast_ps");
  return dir;
}

ModelConfig gpt2() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 256;
  c.max_seq_len = 32;
  return c;
}

// Untied, so the sparse server may run; the corpus's tokens are bytes, so a batch reads a small
// part of a 1024-row vocabulary (and of a 256-row one: a batch of a worker holds 64 tokens).
ModelConfig llama(int vocab) {
  ModelConfig c = gpt2();
  c.arch = "llama";
  c.n_head = 8;
  c.n_kv_head = 4;
  c.intermediate_size = 96;
  c.vocab_size = vocab;
  return c;
}

enum class Sync { kAllReduceZero0, kAllReduceZero1, kServer, kSparseServer };

Config config(const ModelConfig& model, int tp, int pp, Sync sync) {
  Config c;
  c.model = model;
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  c.parallel.micro_batch_size = 2;
  c.parallel.bucket_mb = 0.05;
  c.parallel.zero_stage = sync == Sync::kAllReduceZero1 ? 1 : 0;
  c.parallel.dp_sync = sync == Sync::kServer || sync == Sync::kSparseServer ? "parameter-server" : "allreduce";
  c.parallel.ps_sparse_embedding = sync == Sync::kSparseServer;
  c.training.seq_len = 16;
  c.training.steps = 10;
  c.training.batch_size = 8;
  c.training.lr = 3e-3;
  c.training.warmup_steps = 2;
  c.training.lr_schedule = "constant";
  c.training.eval_interval = 5;
  c.training.eval_batches = 2;
  c.training.threads = 1;
  c.data.train = data_dir() + "/train_*.bin";
  c.data.val = data_dir() + "/val_*.bin";
  // Every rank's, one per model: a job's ranks see one checkpoint.dir, and a run directory
  // refuses a run of another model.
  c.logging.dir = data_dir() + "/run_" + model.arch + "_v" + std::to_string(model.vocab_size);
  c.logging.interval = 1000;
  c.logging.tensorboard = false;
  c.checkpoint.resume = "never";
  return c;
}

struct Outcome {
  TrainSummary summary;
  std::vector<DpTraffic> bytes;  // this rank's, per step
  DpTraffic dense;               // what a dense server's step moves for this rank
  bool holds_embedding = false;
  bool dp_replicas_identical = true;  // every data-parallel rank ends with the same weights
};

Outcome run(const Config& c) {
  Outcome out;
  TrainHooks hooks;
  hooks.after_step = [&](TrainingRun& run, const StepResult&) { out.bytes.push_back(run.dp_bytes_last_step()); };
  hooks.at_end = [&](TrainingRun& run) {
    out.dense = run.dp_bytes_dense_step();
    out.holds_embedding = run.stage().table().contains("wte.weight");
    // The data-parallel replicas of a stage must end bit-identical (the sparse server's last
    // step pulls the rows a worker's copy lacked): compare each with its group's max and min.
    const TensorView p = run.stage().parameters();
    const std::vector<int> group = run.plan().layout.dp_group(world_rank());
    MPI_Comm dp;
    MPI_Comm_split(MPI_COMM_WORLD, group[0], world_rank(), &dp);
    std::vector<float> mine(p.as<float>(), p.as<float>() + p.numel), hi(p.numel), lo(p.numel);
    MPI_Allreduce(mine.data(), hi.data(), int(p.numel), MPI_FLOAT, MPI_MAX, dp);
    MPI_Allreduce(mine.data(), lo.data(), int(p.numel), MPI_FLOAT, MPI_MIN, dp);
    MPI_Comm_free(&dp);
    out.dp_replicas_identical = std::memcmp(mine.data(), hi.data(), p.bytes()) == 0 &&
                                std::memcmp(mine.data(), lo.data(), p.bytes()) == 0;
  };
  const log::Quiet quiet;
  out.summary = train(c, make_mpi_world(std::chrono::milliseconds(120'000)), hooks);
  return out;
}

// Every step's loss and every validation loss within 1e-5 relative; the worst difference.
double expect_same_losses(const Outcome& a, const Outcome& b, const std::string& what) {
  EXPECT_EQ(a.summary.losses.size(), b.summary.losses.size()) << what;
  double worst = 0;
  const auto check = [&](double x, double y, const std::string& which) {
    const double rel = std::abs(x - y) / std::max(std::abs(y), 1e-12);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << what << ": " << which << " " << x << " vs " << y;
  };
  for (size_t i = 0; i < std::min(a.summary.losses.size(), b.summary.losses.size()); ++i) {
    check(a.summary.losses[i], b.summary.losses[i], "loss of step " + std::to_string(i + 1));
    EXPECT_EQ(a.summary.val_losses[i].has_value(), b.summary.val_losses[i].has_value()) << what;
    if (a.summary.val_losses[i] && b.summary.val_losses[i])
      check(*a.summary.val_losses[i], *b.summary.val_losses[i], "val loss after step " + std::to_string(i + 1));
  }
  return worst;
}

void print(const std::string& line) {
  if (world_rank() == 0) std::printf("%s\n", line.c_str());
}

// The server against all-reduce (ZeRO 0 and 1) at one layout that fills the world.
void server_matches_allreduce(const ModelConfig& model, int tp, int pp, const std::string& name) {
  const Outcome server = run(config(model, tp, pp, Sync::kServer));
  const Outcome zero0 = run(config(model, tp, pp, Sync::kAllReduceZero0));
  const Outcome zero1 = run(config(model, tp, pp, Sync::kAllReduceZero1));
  const double d0 = expect_same_losses(server, zero0, name + ": parameter server vs ZeRO 0");
  const double d1 = expect_same_losses(server, zero1, name + ": parameter server vs ZeRO 1");
  EXPECT_TRUE(server.dp_replicas_identical) << name;
  // The dense server's counted traffic is what its shards say, every step.
  for (const DpTraffic& t : server.bytes) {
    EXPECT_EQ(t.push_bytes, server.dense.push_bytes) << name;
    EXPECT_EQ(t.pull_bytes, server.dense.pull_bytes) << name;
  }
  EXPECT_GT(server.dense.push_bytes, 0) << name;
  char line[200];
  std::snprintf(line, sizeof line, "  %s: worst relative loss difference vs ZeRO 0 %.2e, vs ZeRO 1 %.2e", name.c_str(),
                d0, d1);
  print(line);
}

// The sparse server against the dense one: same losses, fewer bytes where the embedding is.
void sparse_matches_dense(const ModelConfig& model, int tp, int pp, const std::string& name) {
  const Config c = config(model, tp, pp, Sync::kSparseServer);
  Config dense_config = c;
  dense_config.parallel.ps_sparse_embedding = false;
  const Outcome sparse = run(c);
  const Outcome dense = run(dense_config);
  const double d = expect_same_losses(sparse, dense, name + ": sparse vs dense parameter server");
  EXPECT_TRUE(sparse.dp_replicas_identical) << name << ": the sparse server's replicas differ at the end";
  ASSERT_EQ(sparse.bytes.size(), dense.bytes.size());
  // Per rank: never more pushed than dense; a stage without the embedding moves the same bytes.
  // A rank whose own shard holds the whole embedding moves no embedding rows either way, so the
  // saving is asserted over the world: every step, fewer bytes pushed and pulled in all.
  double totals[4] = {0, 0, 0, 0};  // sparse push, sparse pull, dense push, dense pull over the steps
  for (size_t i = 0; i < sparse.bytes.size(); ++i) {
    const DpTraffic &s = sparse.bytes[i], &t = dense.bytes[i];
    if (sparse.holds_embedding) {
      EXPECT_LE(s.push_bytes, t.push_bytes) << name << " step " << i + 1;
    } else {
      EXPECT_EQ(s.push_bytes, t.push_bytes) << name << " step " << i + 1;
      EXPECT_EQ(s.pull_bytes, t.pull_bytes) << name << " step " << i + 1;
    }
    double step[4] = {s.push_bytes, s.pull_bytes, t.push_bytes, t.pull_bytes};
    MPI_Allreduce(MPI_IN_PLACE, step, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_GT(step[0], 0) << name << " step " << i + 1;
    EXPECT_LT(step[0], step[2]) << name << " step " << i + 1 << ": pushed bytes over all ranks, sparse vs dense";
    EXPECT_LT(step[1], step[3]) << name << " step " << i + 1 << ": pulled bytes over all ranks, sparse vs dense";
    for (int k = 0; k < 4; ++k) totals[k] += step[k];
  }
  const double per = double(sparse.bytes.size()) * world_size() * 1024.0;  // KiB per rank per step
  char line[240];
  std::snprintf(line, sizeof line,
                "  %s: worst relative loss difference sparse vs dense %.2e; per rank per step: push %.1f KiB sparse vs "
                "%.1f KiB dense, pull %.1f KiB vs %.1f KiB",
                name.c_str(), d, totals[0] / per, totals[2] / per, totals[1] / per, totals[3] / per);
  print(line);
}

TEST(ParameterServer, MatchesAllReduceAndSparseMatchesDense) {
  if (world_size() == 2) {
    server_matches_allreduce(gpt2(), 1, 1, "gpt2 dp2");
    server_matches_allreduce(llama(256), 1, 1, "llama dp2");
    sparse_matches_dense(llama(1024), 1, 1, "llama V1024 dp2");
  } else if (world_size() == 4) {
    server_matches_allreduce(gpt2(), 1, 2, "gpt2 (tied across stages) tp1 pp2 dp2");
    server_matches_allreduce(llama(256), 2, 1, "llama tp2 pp1 dp2");
    server_matches_allreduce(llama(256), 1, 1, "llama dp4");
    sparse_matches_dense(llama(1024), 2, 1, "llama V1024 tp2 pp1 dp2");
    sparse_matches_dense(llama(1024), 1, 2, "llama V1024 tp1 pp2 dp2");
    sparse_matches_dense(llama(1024), 1, 1, "llama V1024 dp4");
  } else {
    FAIL() << "this test has layouts for 2 and 4 ranks, not " << world_size();
  }
}

// A checkpoint holds each element from its server, whose copy is current: resuming the sparse
// server's run from the checkpoint of step 3 repeats steps 4 to 6 exactly (dp = world size).
TEST(ParameterServer, SparseRunResumesFromItsCheckpoint) {
  Config c = config(llama(1024), 1, 1, Sync::kSparseServer);
  c.training.steps = 6;
  c.training.eval_interval = 0;
  c.checkpoint.interval = 3;
  c.checkpoint.dir = data_dir() + "/ps_checkpoints";
  const Outcome whole = run(c);
  Config resumed = c;
  char file[32];
  std::snprintf(file, sizeof file, "/step_%08d.h5", 3);
  resumed.checkpoint.resume = c.checkpoint.dir + file;
  resumed.checkpoint.interval = 0;
  const Outcome second = run(resumed);
  // No evaluation in this run: the last step alone leaves every replica whole.
  EXPECT_TRUE(whole.dp_replicas_identical) << "the sparse server's replicas differ after the last step";
  ASSERT_EQ(whole.summary.losses.size(), 6u);
  ASSERT_EQ(second.summary.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(second.summary.losses[i], whole.summary.losses[i + 3]) << "step " << i + 4;
}

TEST(ParameterServer, ConfigErrorsNameTheKeys) {
  // A config file that asks for ZeRO and a parameter server.
  try {
    parse_config("[parallel]\ndp_sync = \"parameter-server\"\nzero_stage = 1\n", "ps.toml", {});
    ADD_FAILURE() << "zero_stage = 1 with a parameter server was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.dp_sync"), std::string::npos) << e.what();
  }
  // The same built in code, through the rules that code building a Config runs.
  Config c = config(llama(256), 1, 1, Sync::kServer);
  c.parallel.zero_stage = 1;
  try {
    validate_config(c);
    ADD_FAILURE() << "zero_stage = 1 with a parameter server was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage = 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.dp_sync"), std::string::npos) << e.what();
  }
  // A tied head reads every embedding row: no sparse embedding with GPT-2's default tie, nor
  // with a Llama tied on purpose.
  for (const ModelConfig& m : {gpt2(), [] {
                                 ModelConfig t = llama(256);
                                 t.tie_embeddings = true;
                                 return t;
                               }()}) {
    Config s = config(m, 1, 1, Sync::kSparseServer);
    try {
      validate_config(s);
      ADD_FAILURE() << "ps_sparse_embedding with a tied embedding was accepted (" << m.arch << ")";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("model.tie_embeddings"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("parallel.ps_sparse_embedding"), std::string::npos) << e.what();
    }
  }
  // The untied Llama passes.
  EXPECT_NO_THROW(validate_config(config(llama(256), 1, 1, Sync::kSparseServer)));
}

}  // namespace
}  // namespace feast
